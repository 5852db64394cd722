"""The idle policies' events applied in batches (the bus's ActIdle): a batch shares one commit
and one outbox row, each event keeps its own trace record and count, a failed commit undoes
the whole batch (the next sweep acts again), and a batch never outgrows its bound."""

from __future__ import annotations

import json
from typing import Any

from support.daemon_app import DaemonClient, RecordingBackend

from ramakv_daemon.bus.commands import ActIdle
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.ports import StoreError, WriteBatch

N = 40


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def idle_daemon(start_daemon: Any, make_config: Any, backend: Any = None) -> tuple:
    clock = Clock()
    config = make_config(idle_suspend_s=300.0, idle_close_s=0)
    d: DaemonClient = await start_daemon(config, backend=backend, clock=clock)
    await d.daemon.idle_sweep.sweep()  # the start-up sweep, if under way
    await d.daemon.idle_sweep.close()
    for i in range(N):
        await d.turn_end(f"s{i}", ["sys", f"own-{i}-a", f"own-{i}-b"])
    await d.settle()
    clock.now += 301
    return d, clock


def commits_of(d: DaemonClient) -> list[int]:
    """The sessions of each commit the daemon submits from now on, in order."""
    committer = d.daemon.committer
    submitted: list[int] = []
    submit = committer.submit

    def counting(record: Any) -> Any:
        submitted.append(len(record.sessions))
        return submit(record)

    committer.submit = counting  # type: ignore[method-assign]
    return submitted


def consistent(d: DaemonClient) -> None:
    m = d.daemon.default.manager
    assert d.refcounts() == recompute_refcounts(m.sessions.values(), m.forks.values())


async def test_a_batch_is_one_commit_with_a_record_per_event(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    backend = RecordingBackend(orders=True)
    d, _ = await idle_daemon(start_daemon, make_config, backend)
    submitted = commits_of(d)
    acting = d.daemon.bus.handlers[ActIdle]
    acting.step_cpu_s = 60.0  # type: ignore[attr-defined]  # only the batch size bounds a batch
    acting.max_batch = 16  # type: ignore[attr-defined]
    seq = d.daemon.trace.seq
    done = await d.daemon.idle_sweep.sweep()
    assert (done.suspended, done.failed) == (N, 0)
    assert submitted == [16, 16, 8]  # a commit per batch, never more than max_batch
    assert all(s.suspended for s in d.daemon.default.manager.sessions.values())
    consistent(d)
    await d.settle()
    # Every private chunk released (ordered cold: an inferred suspend), once each.
    own = sorted(h for h in backend.of("cold") if h.startswith("own-"))
    assert own == sorted(f"own-{i}-{x}" for i in range(N) for x in "ab")
    assert "sys" in backend.of("cold")  # its last holder went with the last batch
    recs = [json.loads(r) for r in d.daemon.trace.replay(seq) or []]
    suspends = [r for r in recs if r.get("type") == "session_suspend"]
    assert [r["session_id"] for r in suspends] == [f"s{i}" for i in range(N)]
    assert all(r["notes"]["reason"] == "idle_suspend_s" for r in suspends)
    assert all(r["data"] == {"evicted_count": 2, "suspended": True} for r in suspends[:-1])
    metrics = await (await d.client.get("/metrics")).text()
    assert f'ramakv_idle_policy_sessions_total{{action="suspend",namespace="default"}} {N}.0' in (
        metrics
    )


async def test_a_failed_batch_commit_is_undone_and_redone(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    d, _ = await idle_daemon(start_daemon, make_config)
    store = d.daemon.store
    write = store.write
    fails = [1]

    async def failing(batch: WriteBatch) -> None:
        if fails[0]:
            fails[0] -= 1
            raise StoreError("disk on fire")
        await write(batch)

    store.write = failing  # type: ignore[method-assign]
    acting = d.daemon.bus.handlers[ActIdle]
    acting.step_cpu_s = 60.0  # type: ignore[attr-defined]
    acting.max_batch = 16  # type: ignore[attr-defined]
    done = await d.daemon.idle_sweep.sweep()
    assert (done.suspended, done.failed) == (N - 16, 16)  # the first batch rolled back whole
    consistent(d)
    states = {sid: s.suspended for sid, s in d.daemon.default.manager.sessions.items()}
    assert [sid for sid, s in states.items() if not s] == [f"s{i}" for i in range(16)]
    done = await d.daemon.idle_sweep.sweep()
    assert (done.suspended, done.failed) == (16, 0)
    consistent(d)


async def test_an_event_after_the_look_wins_in_a_batch(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    d, clock = await idle_daemon(start_daemon, make_config)
    sweep = d.daemon.idle_sweep
    ns = d.daemon.default
    due = sweep._due(ns, sweep.policies()[ns.key], ["s0", "s1"], clock.now)
    await d.ok("turn_start", session_id="s1")  # s1 active again after the look
    actions = await sweep.act(ns, [sweep._payload(ns, *one) for one in due])
    assert actions == ["suspend", ""]
    assert not ns.manager.sessions["s1"].suspended
    consistent(d)


async def test_a_batch_stops_before_the_event_that_would_overrun_its_step(
    start_daemon, make_config
) -> None:  # type: ignore[no-untyped-def]
    """Each event is judged by the one before: with events of 0.6 ms and a 1 ms step, a
    batch is one event (two made every step 1.2 ms); with 0.3 ms events, three."""
    d, clock = await idle_daemon(start_daemon, make_config)
    submitted = commits_of(d)
    acting = d.daemon.bus.handlers[ActIdle]
    since = clock.now - 300.0
    cpu = [0.0]
    cost = [0.0006]
    acting.cpu_clock = lambda: cpu[0]  # type: ignore[attr-defined]
    apply = acting._apply  # type: ignore[attr-defined]

    def costly(*args: Any) -> Any:
        cpu[0] += cost[0]
        return apply(*args)

    acting._apply = costly  # type: ignore[attr-defined]
    acting.step_cpu_s = 0.001  # type: ignore[attr-defined]
    sweep, ns = d.daemon.idle_sweep, d.daemon.default
    payloads = [sweep._payload(ns, "session_suspend", f"s{i}", since) for i in range(6)]
    assert await sweep.act(ns, payloads) == ["suspend"] * 6
    assert submitted == [1] * 6
    submitted.clear()
    cost[0] = 0.0003
    payloads = [sweep._payload(ns, "session_suspend", f"s{i}", since) for i in range(6, 12)]
    assert await sweep.act(ns, payloads) == ["suspend"] * 6
    assert submitted == [3, 3]
    consistent(d)
