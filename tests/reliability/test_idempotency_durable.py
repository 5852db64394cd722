"""event_id across restarts, with real daemon processes: the stored answer is the reply that
was sent (debug_written included), no-op answers are durable too, an id reused for another
event is refused, and a debug_context too deep to write is refused before anything applies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.daemon_app import DaemonClient
from support.daemon_proc import DaemonProcess


def te(sid: str, hashes: list[str], event_id: str | None = None, **extra: Any) -> dict:
    body: dict[str, Any] = {
        "type": "turn_end",
        "session_id": sid,
        "kv_transfer_params": {"chunk_hashes": hashes},
        **extra,
    }
    if event_id is not None:
        body["event_id"] = event_id
    return body


def turn_count(d: DaemonProcess, sid: str) -> int | None:
    rows = d.event("list_sessions")["data"]["sessions"]
    return next((r["turn_count"] for r in rows if r["session_id"] == sid), None)


def test_debug_written_answer_is_the_same_before_and_after_a_restart(daemon_proc_factory):
    d = daemon_proc_factory(config={"debug_enabled": True})
    event = te("s", ["a"], "dbg-1", debug_context={"messages": [{"role": "user", "content": "hi"}]})
    status, first = d.post(event)
    assert status == 200 and first["data"]["debug_written"] is True
    assert d.post(event)[1] == first
    d.kill()
    d.start()
    assert d.post(event)[1] == first  # was debug_written=false after a restart
    assert turn_count(d, "s") == 1


def test_a_no_op_answer_survives_a_restart(daemon_proc_factory) -> None:
    d = daemon_proc_factory()
    close = {"type": "session_close", "session_id": "t", "event_id": "close-t"}
    status, first = d.post(close)
    assert status == 200 and first["ok"] is True  # closing an unknown session: a no-op
    assert d.post(te("t", ["x"]))[1]["ok"] is True  # t is created afterwards
    d.kill()
    d.start()
    assert d.post(close)[1] == first
    assert turn_count(d, "t") == 1  # the retry did not close the session created since


def test_event_id_reused_for_another_event_is_refused(daemon_proc_factory) -> None:
    d = daemon_proc_factory()
    assert d.post(te("s", ["a"], "once"))[1]["ok"] is True
    for attempt in range(2):
        status, body = d.post(te("s", ["b"], "once"))
        assert status == 200 and body["ok"] is False and "data" not in body
        assert "event_id 'once' was already used for a different event" in body["error"]
        assert d.event("session_map", session_id="s")["data"]["chunk_hashes"] == ["a"]
        if attempt == 0:
            d.kill()
            d.start()  # the request's digest is stored with the answer
    # The same body is still a retry; key order does not matter.
    same = {
        "event_id": "once",
        "kv_transfer_params": {"chunk_hashes": ["a"]},
        "session_id": "s",
        "type": "turn_end",
    }
    assert d.post(same)[1]["ok"] is True and turn_count(d, "s") == 1


async def test_reuse_while_the_first_is_in_flight_is_refused(start_daemon) -> None:
    d: DaemonClient = await start_daemon()
    (_, a), (_, b) = await asyncio.gather(
        d.post(te("s", ["a"], "race")), d.post(te("s", ["b"], "race"))
    )
    assert a["ok"] is True and b["ok"] is False and "'race'" in b["error"]
    assert d.daemon.default.manager.sessions["s"].chunk_hashes == ("a",)


@pytest.mark.parametrize("depth", [65, 990])
@pytest.mark.parametrize("with_id", [False, True])
def test_deep_debug_context_is_refused_before_it_applies(
    daemon_proc_factory, depth: int, with_id: bool
) -> None:
    d = daemon_proc_factory(config={"debug_enabled": True})
    inner = '{"messages": [' + '{"x": ' * (depth - 2) + "1" + "}" * (depth - 2) + "]}"
    eid = '"event_id": "deep-1", ' if with_id else ""
    raw = (
        '{"type": "turn_end", "session_id": "deep", '
        + eid
        + '"kv_transfer_params": {"chunk_hashes": ["a"]}, "debug_context": '
        + inner
        + "}"
    )
    for _ in range(2):
        status, body = d.post(raw.encode())
        assert status == 200 and body["ok"] is False and "data" not in body, body
        if with_id and depth > 255:  # too deep even to compare with an earlier request
            assert body["error"] == "request is nested more than 255 levels deep"
        else:
            assert body["error"] == "'debug_context' is nested more than 64 levels deep"
        assert turn_count(d, "deep") is None
    assert "Traceback" not in d.log()


def test_debug_context_at_the_limit_is_written(daemon_proc_factory) -> None:
    d = daemon_proc_factory(config={"debug_enabled": True})
    inner: Any = 1
    for _ in range(62):  # + messages list + the context object = 64 levels
        inner = {"x": inner}
    status, body = d.post(te("ok", ["a"], debug_context={"messages": [inner]}))
    assert status == 200 and body["data"]["debug_written"] is True


async def test_a_no_op_whose_answer_cannot_be_kept_answers_503(start_daemon, make_config):
    """Nothing changed and nothing is kept: 503, and the retry after recovery applies it."""
    import sqlite3

    from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
    from ramakv_daemon.ports import WriteBatch

    class FullStore(SqliteSessionStore):
        full = False

        async def write(self, batch: WriteBatch) -> None:
            if self.full:
                raise sqlite3.OperationalError("database or disk is full")
            await super().write(batch)

    cfg = make_config()
    store = FullStore(cfg.session_store_path)
    d: DaemonClient = await start_daemon(cfg, store=store)
    close = {"type": "session_close", "session_id": "t", "event_id": "full-close"}
    store.full = True
    status, body = await d.post(close)
    assert status == 503 and body["ok"] is False and "disk is full" in body["error"]
    store.full = False
    status, body = await d.post(close)
    assert status == 200 and body["ok"] is True
    con = sqlite3.connect(cfg.session_store_path)
    assert con.execute(
        "SELECT count(*) FROM event_ids WHERE event_id = 'full-close'"
    ).fetchone() == (1,)
    con.close()
