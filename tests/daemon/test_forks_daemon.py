"""Forks through the in-process daemon on a real SQLite file: ids across restarts, holds
that outlive the parent, expiry on an injected clock (logged, on the trace, durable), the
per-session limit, and the migration of holds written before fork ids."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest
from support.daemon_app import DaemonClient, RecordingBackend

from ramakv_daemon.core.manager import recompute_refcounts


class Clock:
    """A wall clock the test moves by hand: expiry never waits for real time."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def consistent(d: DaemonClient) -> None:
    m = d.daemon.default.manager
    assert d.refcounts() == recompute_refcounts(m.sessions.values(), m.forks.values())


async def test_fork_ids_never_repeat_across_restarts(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    config = make_config()
    d = await start_daemon(config)
    await d.turn_end("p", ["a"])
    assert (await d.ok("session_fork", session_id="p"))["fork_id"] == 1
    assert (await d.ok("session_fork", session_id="p"))["fork_id"] == 2
    await d.ok("session_fork_end", session_id="p", fork_id=2)  # the newest one has ended
    await d.close()
    d2 = await start_daemon(config)
    assert [f.fork_id for f in d2.daemon.default.manager.forks.values()] == [1]
    assert (await d2.ok("session_fork", session_id="p"))["fork_id"] == 3
    await d2.close()
    d3 = await start_daemon(config)
    assert (await d3.ok("session_fork", session_id="p"))["fork_id"] == 4
    # The ended id stays ended after restarts: a late retry changes nothing.
    assert (await d3.ok("session_fork_end", session_id="p", fork_id=2))["fork_end"] is False
    consistent(d3)


async def test_fork_ids_are_unique_across_namespaces(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    from ramakv_daemon.deployments import parse_deployments

    deployments, _ = parse_deployments(
        [{"name": "other", "model": "m", "kv_dtype": "bfloat16", "chunk_size": 256}]
    )
    d = await start_daemon(make_config(deployments=deployments))
    await d.turn_end("p", ["a"])
    await d.ok(
        "turn_end", session_id="q", namespace="other", kv_transfer_params={"chunk_hashes": ["a"]}
    )
    ids = [(await d.ok("session_fork", session_id=sid))["fork_id"] for sid in ("p", "q", "p")]
    assert ids == [1, 2, 3]


async def test_a_closed_parents_fork_survives_restart_and_ends_by_id(
    start_daemon,
    make_config,  # type: ignore[no-untyped-def]
) -> None:
    config = make_config()
    backend = RecordingBackend()
    d = await start_daemon(config, backend=backend)
    await d.turn_end("p", ["sys", "a"])
    fid = (await d.ok("session_fork", session_id="p"))["fork_id"]
    await d.turn_end("p", ["sys", "a", "b"])
    assert await d.ok("session_close", session_id="p") == {"evicted_count": 1, "closed": True}
    await d.settle()
    assert backend.of("delete") == ["b"]  # the subagent's chunks stay
    await d.close()

    backend2 = RecordingBackend(orders=True)
    d2 = await start_daemon(config, backend=backend2)
    assert d2.refcounts() == {"sys": 1, "a": 1}
    assert (await d2.ok("health"))["sessions_count"] == 0
    rows = (await d2.ok("list_sessions"))["sessions"]
    assert [(r["session_id"], r["state"], r["fork_holds"]) for r in rows] == [("p", "closed", 1)]
    assert rows[0]["forks"][0]["fork_id"] == fid
    assert await d2.ok("session_fork_end", session_id="p", fork_id=fid) == {
        "fork_end": True,
        "fork_id": fid,
    }
    await d2.settle()
    # A fork_end is a refcount reaching 0, not a declared close: ordered cold, deleted by
    # the retention sweep later.
    assert backend2.of("delete") == [] and sorted(backend2.of("cold")) == ["a", "sys"]
    assert (await d2.ok("list_sessions"))["sessions"] == []
    consistent(d2)


async def test_expiry_on_an_injected_clock(
    start_daemon,
    make_config,
    caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    clock = Clock()
    backend = RecordingBackend(orders=True)
    config = make_config(fork_hold_ttl_s=3600.0)
    d = await start_daemon(config, backend=backend, clock=clock)
    daemon = d.daemon
    await d.turn_end("p", ["sys", "a"])
    old = (await d.ok("session_fork", session_id="p"))["fork_id"]
    clock.now += 1800
    await d.turn_end("p", ["sys", "b"])
    young = (await d.ok("session_fork", session_id="p"))["fork_id"]
    await d.ok("session_close", session_id="p")
    rows = (await d.ok("list_sessions"))["sessions"]
    assert [(f["fork_id"], f["age_s"]) for f in rows[0]["forks"]] == [(old, 1800.0), (young, 0.0)]
    seq = daemon.trace.seq

    clock.now += 1799
    assert await daemon.fork_expiry.expire_forks() == 0  # the old one is 3599 s old: not yet
    clock.now += 1
    with caplog.at_level(logging.WARNING, logger="ramakv"):
        assert await daemon.fork_expiry.expire_forks() == 1
    warning = [r.getMessage() for r in caplog.records if "fork hold expired" in r.getMessage()]
    assert warning == [
        f"fork hold expired: session=p fork_id={old} age=3600s (older than "
        "fork_hold_ttl_s=3600; its session_fork_end never came)"
    ]
    await d.settle()
    assert backend.of("cold")[-1:] == ["a"]  # released as a fork_end would: zeros go cold
    assert d.refcounts() == {"sys": 1, "b": 1}
    records = [json.loads(r) for r in daemon.trace.replay(seq) or []]
    expired = [r for r in records if r.get("type") == "fork_expire"]
    assert len(expired) == 1
    assert expired[0]["data"]["expired"] == [{"fork_id": old, "session_id": "p", "age_s": 3600.0}]
    assert expired[0]["delta"]["forks"] == {str(old): None}
    assert expired[0]["delta"]["refcounts"] == {"sys": 1, "a": 0}
    assert expired[0]["evict"] == [] and expired[0]["cold"] == ["a"]
    assert "_touched" not in expired[0]
    # A follower of p alone (/trace?session=p) gets it too: the parent is closed, so only
    # the expiry names it.
    only_p = daemon.trace.subscribe("p")
    only_q = daemon.trace.subscribe("q")
    try:
        mine = [json.loads(r)["type"] for r in daemon.trace.replay(seq, only_p) or []]
        assert "fork_expire" in mine
        assert daemon.trace.replay(seq, only_q) == []
    finally:
        daemon.trace.unsubscribe(only_p)
        daemon.trace.unsubscribe(only_q)
    metrics = await (await d.client.get("/metrics")).text()
    assert "ramakv_open_forks 1.0" in metrics
    assert "ramakv_fork_holds_expired_total 1.0" in metrics
    # Durable: a restart does not bring it back.
    await d.close()
    d2 = await start_daemon(config, clock=clock)
    assert [f.fork_id for f in d2.daemon.default.manager.forks.values()] == [young]
    consistent(d2)


async def test_holds_that_expired_while_stopped_go_at_start(
    start_daemon,
    make_config,
    caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
) -> None:
    clock = Clock()
    config = make_config(fork_hold_ttl_s=60.0)
    d = await start_daemon(config, clock=clock)
    await d.turn_end("p", ["a"])
    await d.ok("session_fork", session_id="p")
    await d.close()
    clock.now += 61
    with caplog.at_level(logging.WARNING, logger="ramakv"):
        d2 = await start_daemon(config, clock=clock)
    assert len(d2.daemon.default.manager.forks) == 0
    assert d2.refcounts() == {"a": 1}
    assert any("fork hold expired: session=p fork_id=1" in r.getMessage() for r in caplog.records)


async def test_a_ttl_of_zero_never_expires(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    clock = Clock()
    d = await start_daemon(make_config(fork_hold_ttl_s=0.0), clock=clock)
    await d.turn_end("p", ["a"])
    await d.ok("session_fork", session_id="p")
    clock.now += 10 * 365 * 86400
    assert await d.daemon.fork_expiry.expire_forks() == 0
    assert len(d.daemon.default.manager.forks) == 1


async def test_the_open_fork_limit_answers_a_clear_error(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    d = await start_daemon(make_config(max_forks_per_session=2))
    await d.turn_end("p", ["a"])
    await d.ok("session_fork", session_id="p")
    await d.ok("session_fork", session_id="p")
    before = d.refcounts()
    error = await d.err("session_fork", session_id="p")
    assert error == (
        "session 'p' has 2 open forks, the limit (max_forks_per_session = 2); end one "
        "with session_fork_end first"
    )
    assert d.refcounts() == before and len(d.daemon.default.manager.forks) == 2
    await d.ok("session_fork_end", session_id="p")
    assert (await d.ok("session_fork", session_id="p"))["fork_id"] == 3  # a refusal takes none


async def test_a_store_with_holds_from_before_fork_ids_opens(
    start_daemon,
    make_config,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    """The schema as it was before this change: holds in session_state.fork_holds_json."""
    db = tmp_path / "before.db"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE sessions (session_id TEXT PRIMARY KEY, map_json TEXT NOT NULL, "
        "turn_count INTEGER NOT NULL DEFAULT 0);"
        "CREATE TABLE session_state (session_id TEXT PRIMARY KEY, suspended INTEGER NOT NULL "
        "DEFAULT 0, fork_holds_json TEXT NOT NULL DEFAULT '[]', last_event_ts REAL NOT NULL "
        "DEFAULT 0, namespace TEXT NOT NULL DEFAULT '');"
    )
    con.execute("INSERT INTO sessions VALUES ('p', ?, 3)", (json.dumps(["c"]),))
    con.execute(
        "INSERT INTO session_state VALUES ('p', 0, ?, 5.0, '')",
        (json.dumps([["a", "b"], ["b", "c"]]),),
    )
    con.execute("INSERT INTO sessions VALUES ('q', ?, 1)", (json.dumps(["x"]),))
    con.execute("INSERT INTO session_state VALUES ('q', 0, '[]', 5.0, '')")
    con.commit()
    con.close()
    clock = Clock()
    # Its rows were written at t=5 s: the idle policies (tested apart) would close them.
    config = make_config(session_store_path=str(db), idle_suspend_s=0.0, idle_close_s=0.0)
    d = await start_daemon(config, clock=clock)
    m = d.daemon.default.manager
    # Fresh ids in the old order; created at the migration (their real age is unknown).
    assert [(f.fork_id, f.session_id, f.hashes) for f in m.forks.values()] == [
        (1, "p", ("a", "b")),
        (2, "p", ("b", "c")),
    ]
    assert d.refcounts() == {"a": 1, "b": 2, "c": 2, "x": 1}
    con = sqlite3.connect(db)
    assert con.execute(
        "SELECT fork_holds_json FROM session_state WHERE session_id='p'"
    ).fetchone() == ("[]",)
    con.close()
    # The newest migrated hold ends first, as it did before; the counter goes on.
    assert await d.ok("session_fork_end", session_id="p") == {"fork_end": True, "fork_id": 2}
    assert (await d.ok("session_fork", session_id="p"))["fork_id"] == 3
    consistent(d)
