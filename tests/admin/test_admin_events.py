"""Admin events over POST /event: list_sessions, chunk_info, chunk_evict, backend_query."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from support.daemon_app import DaemonClient, StartDaemon
from support.trace_wire import recv


async def seed(d: DaemonClient) -> None:
    """a, b share sys; c forks (hold on c1) then moves on; s is suspended."""
    await d.turn_end("a", ["sys", "a1", "a2"])
    await d.turn_end("b", ["sys", "b1"])
    await d.turn_end("c", ["c1"])
    await d.ok("session_fork", session_id="c")
    await d.turn_end("c", ["c2"])
    await d.turn_end("s", ["s1", "sys"])
    await d.ok("session_suspend", session_id="s")


async def view(d: DaemonClient, hashes: list[str]) -> tuple[Any, Any, Any]:
    """Everything an operator can see: list_sessions, each session_map, chunk_info."""
    rows = await d.ok("list_sessions")
    for r in rows["sessions"]:  # a fork's age moves with the clock; the rest must not
        for f in r["forks"]:
            f.pop("age_s")
    maps = {
        r["session_id"]: await d.ok("session_map", session_id=r["session_id"])
        for r in rows["sessions"]
    }
    info = await d.ok("chunk_info", chunk_hashes=hashes)
    return rows, maps, info


ALL = ["sys", "a1", "a2", "b1", "c1", "c2", "s1", "nope"]


async def test_admin_events_are_listed(daemon: DaemonClient) -> None:
    events = (await daemon.ok("list_events"))["admin_events"]
    assert events["list_sessions"]["optional"] == ["state", "limit", "offset", "session_ids"]
    assert events["chunk_info"]["required"] == ["chunk_hashes"]
    assert events["chunk_evict"]["required"] == ["chunk_hashes"]
    assert events["chunk_evict"]["optional"] == ["dry_run", "force"]
    assert events["backend_query"]["required"] == ["chunk_hashes"]
    for name in ("list_sessions", "chunk_info", "chunk_evict", "backend_query"):
        assert events[name]["description"].startswith("Admin:")


async def test_list_sessions_rows_filter_and_paging(daemon: DaemonClient) -> None:
    d = daemon
    assert await d.ok("list_sessions") == {"total": 0, "sessions": []}
    await seed(d)
    data = await d.ok("list_sessions")
    assert data["total"] == 4
    rows = data["sessions"]
    assert [r["session_id"] for r in rows] == ["a", "b", "c", "s"]
    c = rows[2]
    assert set(c) == {
        "session_id",
        "state",
        "turn_count",
        "chunk_count",
        "shared_count",
        "fork_holds",
        "forks",
        "last_event_ts",
    }
    assert [f["fork_id"] for f in c["forks"]] == [1]
    assert (c["state"], c["turn_count"], c["chunk_count"], c["fork_holds"]) == ("active", 2, 1, 1)
    assert c["last_event_ts"] > 0
    assert rows[3]["state"] == "suspended" and rows[3]["chunk_count"] == 2
    suspended = await d.ok("list_sessions", state="suspended")
    assert suspended["total"] == 1 and [r["session_id"] for r in suspended["sessions"]] == ["s"]
    active = await d.ok("list_sessions", state="active", limit=2, offset=1)
    assert active["total"] == 3 and [r["session_id"] for r in active["sessions"]] == ["b", "c"]
    assert (await d.ok("list_sessions", limit=0))["sessions"] == []
    assert (await d.ok("list_sessions", offset=10))["sessions"] == []
    assert (await d.ok("list_sessions", state=None, limit=None))["total"] == 4


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"state": "gone"}, '\'state\' must be "active", "suspended" or "closed"'),
        ({"state": 1}, '\'state\' must be "active", "suspended" or "closed"'),
        ({"state": ""}, '\'state\' must be "active", "suspended" or "closed"'),
        ({"limit": -1}, "'limit' must be an integer from 0 to 10000"),
        ({"limit": 10001}, "'limit' must be an integer from 0 to 10000"),
        ({"limit": "10"}, "'limit' must be an integer from 0 to 10000"),
        ({"limit": 1.5}, "'limit' must be an integer from 0 to 10000"),
        ({"limit": True}, "'limit' must be an integer from 0 to 10000"),
        ({"offset": -3}, "'offset' must be an integer from 0 to 2147483648"),
    ],
)
async def test_list_sessions_errors(daemon: DaemonClient, fields: dict, error: str) -> None:
    assert await daemon.err("list_sessions", **fields) == error


async def test_chunk_info_refcounts_and_holders(daemon: DaemonClient) -> None:
    d = daemon
    await seed(d)
    info = (await d.ok("chunk_info", chunk_hashes=ALL + ["sys"]))["chunks"]
    assert set(info) == set(ALL)
    assert info["sys"] == {"refcount": 2, "holders": ["a", "b"]}  # s is suspended
    assert info["c1"] == {"refcount": 1, "holders": ["c"]}  # the fork hold
    assert info["s1"] == {"refcount": 0, "holders": []}
    # Unknown hash: refcount 0 and no holders (not an error).
    assert info["nope"] == {"refcount": 0, "holders": []}
    assert await d.ok("chunk_info", chunk_hashes=[]) == {"chunks": {}}


@pytest.mark.parametrize("type_", ["chunk_info", "chunk_evict", "backend_query"])
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({}, "missing required field 'chunk_hashes'"),
        ({"chunk_hashes": "sys"}, "'chunk_hashes' must be a list of strings"),
        ({"chunk_hashes": {"sys": 1}}, "'chunk_hashes' must be a list of strings"),
        ({"chunk_hashes": None}, "'chunk_hashes' must be a list of strings"),
        ({"chunk_hashes": ["ok", 7]}, "'chunk_hashes[1]' must be a non-empty string"),
        ({"chunk_hashes": [""]}, "'chunk_hashes[0]' must be a non-empty string"),
        ({"chunk_hashes": ["x" * 101]}, "'chunk_hashes[0]' is longer than 100 bytes"),
        (
            {"chunk_hashes": [f"h{i}" for i in range(1001)]},
            "'chunk_hashes' has 1001 hashes, more than the limit of 1000",
        ),
    ],
)
async def test_chunk_hashes_errors(
    daemon: DaemonClient, type_: str, fields: dict, error: str
) -> None:
    d = daemon
    await d.turn_end("a", ["sys"])
    before = await view(d, ["sys"])
    assert await d.err(type_, **fields) == error
    assert await view(d, ["sys"]) == before


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"chunk_hashes": []}, "'chunk_hashes' must not be empty"),
        ({"chunk_hashes": [], "force": True}, "'chunk_hashes' must not be empty"),
        ({"chunk_hashes": [], "dry_run": True}, "'chunk_hashes' must not be empty"),
        ({"chunk_hashes": ["sys"], "dry_run": "yes"}, "'dry_run' must be true or false"),
        ({"chunk_hashes": ["sys"], "dry_run": 1}, "'dry_run' must be true or false"),
        ({"chunk_hashes": ["sys"], "force": "true"}, "'force' must be true or false"),
        ({"chunk_hashes": ["sys"], "force": 0}, "'force' must be true or false"),
    ],
)
async def test_chunk_evict_errors_change_nothing(
    daemon: DaemonClient, fields: dict, error: str
) -> None:
    d = daemon
    await seed(d)
    before = await view(d, ALL)
    ws = await d.ws()
    await recv(ws)
    assert await d.err("chunk_evict", **fields) == error
    rec = await recv(ws)
    assert rec["ok"] is False and rec["error"] == error
    assert rec["delta"] == {"sessions": {}, "refcounts": {}}
    assert await view(d, ALL) == before
    await ws.close()


async def test_chunk_evict_without_force_refuses_referenced(daemon: DaemonClient) -> None:
    d = daemon
    await seed(d)
    before = await view(d, ALL)
    data = await d.ok("chunk_evict", chunk_hashes=["sys", "c1", "s1", "nope", "nope"])
    assert data == {
        "dry_run": False,
        "force": False,
        "evicted": ["nope"],
        "refused": {"sys": ["a", "b", "s"], "c1": ["c"], "s1": ["s"]},
        "released": {},
    }
    # Nothing changed. s1 is only in the suspended map: it holds no reference, but the
    # session would want it back at snapshot_restore, so it is refused without force.
    assert await view(d, ALL) == before


@pytest.mark.parametrize("force", [False, True])
async def test_dry_run_changes_nothing(daemon: DaemonClient, force: bool) -> None:
    d = daemon
    await seed(d)
    before = await view(d, ALL)
    ws = await d.ws()
    snap = await recv(ws)
    data = await d.ok(
        "chunk_evict", chunk_hashes=["sys", "c1", "a1", "nope"], dry_run=True, force=force
    )
    assert data["dry_run"] is True and data["force"] is force
    if force:
        assert data["evicted"] == ["nope", "sys", "c1", "a1"]
        assert data["refused"] == {}
        assert data["released"] == {"a": ["a1", "sys"], "b": ["sys"], "c": ["c1"], "s": ["sys"]}
    else:
        assert data["evicted"] == ["nope"]
        assert data["refused"] == {"sys": ["a", "b", "s"], "c1": ["c"], "a1": ["a"]}
        assert data["released"] == {}
    rec = await recv(ws)
    assert rec["delta"] == {"sessions": {}, "refcounts": {}}
    assert rec["evict"] == [] and rec["demote"] == [] and "notes" not in rec
    assert await view(d, ALL) == before
    ws2 = await d.ws()
    again = await recv(ws2)
    assert again["sessions"] == snap["sessions"] and again["refcounts"] == snap["refcounts"]
    await ws.close()
    await ws2.close()


async def test_force_drops_references_and_says_so(
    start_daemon: StartDaemon, caplog: pytest.LogCaptureFixture
) -> None:
    d = await start_daemon()
    await seed(d)
    ws = await d.ws()
    await recv(ws)
    with caplog.at_level(logging.WARNING, logger="ramakv"):
        data = await d.ok("chunk_evict", chunk_hashes=["sys", "c1", "nope"], force=True)
    assert data == {
        "dry_run": False,
        "force": True,
        "evicted": ["nope", "sys", "c1"],
        "refused": {},
        "released": {"a": ["sys"], "b": ["sys"], "c": ["c1"], "s": ["sys"]},
    }
    rec = await recv(ws)
    assert rec["ok"] is True and rec["session_id"] is None
    assert rec["notes"] == {"forced": True}
    # Forced chunks leave every tier, even one a suspended session's map listed.
    assert sorted(rec["evict"]) == ["c1", "nope", "sys"] and rec["demote"] == []
    assert rec["delta"]["refcounts"] == {"sys": 0, "c1": 0}
    assert rec["delta"]["sessions"]["a"]["chunk_count"] == 2
    assert rec["delta"]["sessions"]["c"]["fork_holds"] == 1  # an emptied hold stays open
    assert "chunk_evict force" in caplog.text and "'sys'" in caplog.text
    info = (await d.ok("chunk_info", chunk_hashes=["sys", "c1", "a1"]))["chunks"]
    assert info == {
        "sys": {"refcount": 0, "holders": []},
        "c1": {"refcount": 0, "holders": []},
        "a1": {"refcount": 1, "holders": ["a"]},
    }
    assert (await d.ok("session_map", session_id="b"))["chunk_hashes"] == ["b1"]
    # Force also takes the chunk out of the suspended session's stored map.
    assert (await d.ok("session_map", session_id="s"))["chunk_hashes"] == ["s1"]
    # Durable: a restarted daemon on the same file agrees.
    before = await view(d, ["sys", "c1", "a1", "b1"])
    await d.client.close()
    d2 = await start_daemon()
    assert await view(d2, ["sys", "c1", "a1", "b1"]) == before
    # Forcing a chunk nobody holds is not a forced eviction.
    await ws.close()
    ws = await d2.ws()
    await recv(ws)
    await d2.ok("chunk_evict", chunk_hashes=["sys"], force=True)
    assert "notes" not in await recv(ws)
    await ws.close()


async def test_backend_query_with_noop_backend(daemon: DaemonClient) -> None:
    d = daemon
    await d.turn_end("a", ["sys", "a1"])
    data = await d.ok("backend_query", chunk_hashes=["sys", "nope"])
    assert data == {
        "backend": "noop",
        "ok": True,
        "error": None,
        "locations": {"sys": [], "nope": []},
    }
    assert (await d.ok("backend_query", chunk_hashes=[]))["locations"] == {}
