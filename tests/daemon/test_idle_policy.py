"""The daemon's idle policies on an injected clock: idle_suspend_s suspends and idle_close_s
closes through the event pipeline (committed, on the trace, counted), the condition lets an
event that came first win, a turn_start restarts the clock, which is the stored
last_event_ts across restarts, per deployment, and bad input changes nothing."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from support.daemon_app import DaemonClient, RecordingBackend

from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.deployments import parse_deployments

KEEP, FAST = "kvp-" + "1" * 32, "kvp-" + "2" * 32


class Clock:
    """A wall clock the test moves by hand: no policy ever waits for real time."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def manual(d: DaemonClient) -> DaemonClient:
    """Stop the daemon's own sweep loop (after its start-up sweep): each test sweeps by
    hand, so what a sweep did is the test's to count."""
    await d.daemon.idle_sweep.sweep()  # waits for the start-up sweep under way, if any
    await d.daemon.idle_sweep.close()
    return d


def sessions(d: DaemonClient) -> dict[str, str]:
    return {sid: s.state for sid, s in d.daemon.default.manager.sessions.items()}


def consistent(d: DaemonClient) -> None:
    m = d.daemon.default.manager
    assert d.refcounts() == recompute_refcounts(m.sessions.values(), m.forks.values())


def records(d: DaemonClient, since: int) -> list[dict[str, Any]]:
    return [json.loads(r) for r in d.daemon.trace.replay(since) or []]


async def test_suspend_then_close_through_the_pipeline(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    backend = RecordingBackend(orders=True)
    config = make_config(idle_suspend_s=300.0, idle_close_s=3600.0)
    d = await manual(await start_daemon(config, backend=backend, clock=clock))
    t0 = clock.now
    await d.turn_end("p", ["sys", "a"])
    await d.turn_end("q", ["sys", "b"])
    clock.now += 200
    await d.ok("turn_start", session_id="q")  # q's clock starts again at t0 + 200
    seq = d.daemon.trace.seq

    clock.now = t0 + 299
    done = await d.daemon.idle_sweep.sweep()
    assert (done.suspended, done.closed, done.looked_at) == (0, 0, 2)
    clock.now = t0 + 300
    done = await d.daemon.idle_sweep.sweep()
    assert (done.suspended, done.closed) == (1, 0)
    assert sessions(d) == {"p": "suspended", "q": "active"}
    await d.settle()
    assert backend.of("cold") == ["a"]  # sys is still q's (the policy's suspend is inferred)
    # The policy's suspend is not the host's activity: p's clock still reads t0.
    assert d.daemon.default.manager.sessions["p"].last_event_ts == t0
    consistent(d)

    suspends = [r for r in records(d, seq) if r.get("type") == "session_suspend"]
    assert len(suspends) == 1 and suspends[0]["session_id"] == "p"
    assert suspends[0]["notes"] == {"idle_s": 300.0, "reason": "idle_suspend_s"}
    assert suspends[0]["data"] == {"evicted_count": 1, "suspended": True}

    clock.now = t0 + 3600
    done = await d.daemon.idle_sweep.sweep()
    # p: an hour since its last turn_end, closed; q: 3400 s idle, suspended now.
    assert (done.suspended, done.closed) == (1, 1)
    assert sessions(d) == {"q": "suspended"}
    await d.settle()
    # The policy's close is inferred: a is only ordered cold (again) until the retention
    # sweep finds it dead past the window.
    assert "a" not in backend.of("delete") and backend.of("cold").count("a") == 2
    clock.now = t0 + 3600 + d.config.retain_unreferenced_s
    assert await d.daemon.retention.sweep() == 1
    await d.settle()
    assert backend.of("delete") == ["a"]
    clock.now = t0 + 3600  # back to when the policies acted: the restart below checks them
    closes = [r for r in records(d, seq) if r.get("type") == "session_close"]
    assert [(r["session_id"], r["notes"]) for r in closes] == [
        ("p", {"idle_s": 3600.0, "reason": "idle_close_s"})
    ]
    metrics = await (await d.client.get("/metrics")).text()
    assert 'ramakv_idle_policy_sessions_total{action="suspend",namespace="default"} 2.0' in metrics
    assert 'ramakv_idle_policy_sessions_total{action="close",namespace="default"} 1.0' in metrics
    assert 'ramakv_events_total{outcome="ok",type="session_suspend"}' in metrics
    consistent(d)

    # Committed: a restart finds p closed and q suspended.
    await d.close()
    d2 = await manual(await start_daemon(config, clock=clock))
    assert sessions(d2) == {"q": "suspended"}


async def test_an_event_that_came_first_wins(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    d = await manual(await start_daemon(idle_suspend_s=300.0, clock=clock))
    t0 = clock.now
    await d.turn_end("p", ["a"])
    clock.now += 10
    await d.turn_end("p", ["a", "b"])  # after the sweep looked (t0 is what it saw)
    before = d.state()
    answer = await d.ok("session_suspend", session_id="p", if_idle_since=t0)
    assert answer == {"evicted_count": 0, "suspended": False}
    answer = await d.ok("session_close", session_id="p", if_idle_since=t0)
    assert answer == {"evicted_count": 0, "closed": False}
    assert d.state() == before
    # Unknown sessions and already suspended ones: nothing done, said so.
    assert (await d.ok("session_suspend", session_id="nobody", if_idle_since=t0))[
        "suspended"
    ] is False
    await d.ok("session_suspend", session_id="p")
    answer = await d.ok("session_suspend", session_id="p", if_idle_since=clock.now)
    assert answer == {"evicted_count": 0, "suspended": False}
    # Idle enough: acted on.
    assert (await d.ok("session_close", session_id="p", if_idle_since=clock.now))["closed"]


async def test_bad_if_idle_since_is_refused_and_changes_nothing(start_daemon) -> None:  # type: ignore[no-untyped-def]
    d = await start_daemon()
    await d.turn_end("p", ["a"])
    before = d.state()
    for bad, why in [
        ("soon", "'if_idle_since' must be a number (a wall-clock time in seconds)"),
        (True, "'if_idle_since' must be a number (a wall-clock time in seconds)"),
        (-1, "'if_idle_since' must be >= 0"),
    ]:
        for type_ in ("session_suspend", "session_close"):
            assert await d.err(type_, session_id="p", if_idle_since=bad) == why
    assert d.state() == before


async def test_a_turn_start_restarts_the_clock(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    d = await manual(await start_daemon(idle_suspend_s=300.0, clock=clock))
    await d.turn_end("p", ["a"])
    clock.now += 299
    await d.ok("turn_start", session_id="p")  # a turn in flight: its clock restarts
    clock.now += 299
    assert (await d.daemon.idle_sweep.sweep()).suspended == 0
    clock.now += 1
    assert (await d.daemon.idle_sweep.sweep()).suspended == 1
    # Its turn_end (a turn longer than idle_suspend_s) takes it back: active, referenced.
    await d.turn_end("p", ["a", "b"])
    assert sessions(d) == {"p": "active"}
    assert d.refcounts() == {"a": 1, "b": 1}


async def test_the_idle_clock_survives_restarts(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    config = make_config(idle_suspend_s=300.0, idle_close_s=1000.0)
    d = await manual(await start_daemon(config, clock=clock))
    t0 = clock.now
    await d.turn_end("p", ["a"])
    await d.close()

    clock.now = t0 + 200  # down for 200 s: the clock kept running
    d = await manual(await start_daemon(config, clock=clock))
    assert sessions(d) == {"p": "active"}
    clock.now = t0 + 299
    assert (await d.daemon.idle_sweep.sweep()).suspended == 0
    clock.now = t0 + 300  # 300 s after its last event, not after the restart
    assert (await d.daemon.idle_sweep.sweep()).suspended == 1
    await d.close()

    clock.now = t0 + 1000  # the close fell due while stopped: the start-up sweep closes
    d = await start_daemon(config, clock=clock)
    await d.daemon.idle_sweep.sweep()  # waits for the start-up sweep
    assert sessions(d) == {}


async def test_rows_without_a_stored_time_start_their_clock_when_seen(
    start_daemon,
    make_config,  # type: ignore[no-untyped-def]
) -> None:
    clock = Clock()
    config = make_config(idle_suspend_s=300.0)
    d = await manual(await start_daemon(config, clock=clock))
    await d.turn_end("old", ["a"])
    await d.close()
    con = sqlite3.connect(config.session_store_path)
    with con:  # as a row written before last_event_ts was stored
        con.execute("UPDATE session_state SET last_event_ts = 0")
    con.close()
    clock.now += 10_000
    d = await manual(await start_daemon(config, clock=clock))  # its clock starts now
    assert sessions(d) == {"old": "active"}
    clock.now += 299
    assert (await d.daemon.idle_sweep.sweep()).suspended == 0
    clock.now += 1
    assert (await d.daemon.idle_sweep.sweep()).suspended == 1


async def test_policies_per_deployment(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    deployments, warnings = parse_deployments(
        [
            {"name": "keep", "namespace": KEEP, "idle_suspend_s": 0, "idle_close_s": 0},
            {"name": "fast", "namespace": FAST, "idle_suspend_s": 10},
        ]
    )
    assert warnings == []
    clock = Clock()
    d = await manual(
        await start_daemon(
            make_config(deployments=deployments, idle_suspend_s=300.0, idle_close_s=0.0),
            clock=clock,
        )
    )
    for ns, sid in (("keep", "k"), ("fast", "f"), ("", "u")):
        await d.ok(
            "turn_end", session_id=sid, namespace=ns, kv_transfer_params={"chunk_hashes": ["x"]}
        )
    clock.now += 10
    assert (await d.daemon.idle_sweep.sweep()).suspended == 1  # fast's
    clock.now += 290
    assert (await d.daemon.idle_sweep.sweep()).suspended == 1  # the default's
    states = {sid: s.state for ns in d.daemon.namespaces for sid, s in ns.manager.sessions.items()}
    assert states == {"k": "active", "f": "suspended", "u": "suspended"}


def test_a_bad_deployment_policy_warns_and_uses_the_top_level() -> None:
    deployments, warnings = parse_deployments(
        [{"name": "x", "namespace": KEEP, "idle_suspend_s": "soon", "idle_close_s": -5}]
    )
    assert deployments[0].idle_suspend_s is None and deployments[0].idle_close_s is None
    assert warnings == [
        "deployments[0]: 'idle_suspend_s' must be a number of seconds >= 0; using the top-level",
        "deployments[0]: 'idle_close_s' must be a number of seconds >= 0; using the top-level",
    ]


async def test_zero_is_off(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    d = await start_daemon(idle_suspend_s=0.0, idle_close_s=0.0, clock=clock)
    assert d.daemon.idle_sweep._task is None  # no loop at all
    await d.turn_end("p", ["a"])
    clock.now += 10 * 365 * 86400
    done = await d.daemon.idle_sweep.sweep()
    assert (done.looked_at, done.suspended, done.closed) == (0, 0, 0)
    assert sessions(d) == {"p": "active"}


async def test_a_turn_starts_time_is_stored(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    """Issue 31 item 7: the idle clock counts from the last event of either kind, across a
    restart too: a turn in flight when the daemon restarted is not closed at start-up."""
    clock = Clock()
    config = make_config(idle_close_s=300.0)
    d = await manual(await start_daemon(config, clock=clock))
    t0 = clock.now
    await d.turn_end("p", ["a"])
    clock.now = t0 + 200
    await d.ok("turn_start", session_id="p")  # a long turn begins
    await d.close()

    clock.now = t0 + 300  # 300 s after its turn_end, 100 s after its turn_start
    d = await start_daemon(config, clock=clock)
    await d.daemon.idle_sweep.sweep()  # waits for the start-up sweep
    assert sessions(d) == {"p": "active"}
    assert d.daemon.default.manager.sessions["p"].last_event_ts == t0 + 200
    clock.now = t0 + 499
    assert (await d.daemon.idle_sweep.sweep()).closed == 0
    clock.now = t0 + 500
    assert (await d.daemon.idle_sweep.sweep()).closed == 1
