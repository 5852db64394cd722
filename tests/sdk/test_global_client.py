"""The fire-and-forget global client: order per session, never raising, flush, config."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.trace_events import head_seq

import ramakv_sdk as sdk
from ramakv_sdk import AsyncClient
from ramakv_sdk.global_client import _reset_for_tests

HANG_GUARD_S = 120.0  # a hang fails the test; nothing here is timed


@pytest.fixture(autouse=True)
def fresh_global_client() -> Iterator[None]:
    _reset_for_tests()
    yield
    _reset_for_tests()


def replay(url: str) -> list[dict]:
    """Every trace record since seq 0 (the daemon's replay ring), read up to the daemon's
    last seq now: a definite end, never a pause in the stream."""

    async def run() -> list[dict]:
        head = await head_seq(url)
        async with AsyncClient(url) as c:
            sub = c.subscribe_trace(since=0)
            out: list[dict] = []
            try:
                while (sub.last_seq or 0) < head:
                    out.append(await asyncio.wait_for(sub.__anext__(), HANG_GUARD_S))
                return out
            finally:
                await sub.aclose()

    return asyncio.run(run())


def test_per_session_order_under_concurrency(daemon_proc) -> None:
    sdk.init(daemon_proc.url)
    threads_n, sessions_per_thread, turns = 4, 4, 10

    def host(t: int) -> None:
        for k in range(turns):
            for s in range(sessions_per_thread):
                sid = f"t{t}s{s}"
                sdk.turn_start(sid)
                sdk.turn_end(sid, {"chunk_hashes": [f"{sid}-{k:x}", "5a"]})

    workers = [threading.Thread(target=host, args=(t,)) for t in range(threads_n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sdk.flush(120)
    st = sdk.stats()
    total = threads_n * sessions_per_thread * turns * 2
    assert st["sent"] == total and st["dropped"] == 0 and st["failed"] == 0
    seen: dict[str, list[str]] = {}
    for rec in replay(daemon_proc.url):
        if rec.get("type") == "turn_end":
            # Protocol 2 deltas carry summaries: the turn's own chunk is the one it added.
            sid = rec["session_id"]
            added = [h for h, n in rec["delta"]["refcounts"].items() if n and h != "5a"]
            seen.setdefault(sid, []).append(added[0].removeprefix(f"{sid}-"))
    assert len(seen) == threads_n * sessions_per_thread
    for sid, firsts in seen.items():
        assert firsts == [f"{k:x}" for k in range(turns)], sid
    assert daemon_proc.event("session_map", session_id="t3s3")["data"]["chunk_hashes"] == [
        f"t3s3-{turns - 1:x}",
        "5a",
    ]


def test_daemon_down_never_raises_and_counts_drops(unused_tcp_port: int) -> None:
    sdk.init(f"http://127.0.0.1:{unused_tcp_port}", timeout=0.5, retry_for=0.5)
    for i in range(50):
        sdk.turn_start(f"s{i}")
        sdk.turn_end(f"s{i}", {"chunk_hashes": ["aa"]}, {"why": "test"})
        sdk.snapshot_restore(f"s{i}", source_session_id="other")
        sdk.session_fork(f"s{i}")
        sdk.session_fork_end(f"s{i}")
        sdk.session_suspend(f"s{i}")
        sdk.session_close(f"s{i}")
    assert sdk.flush(120)
    st = sdk.stats()
    assert st["dropped_unavailable"] == 350 and st["sent"] == 0


def test_calls_never_wait_for_the_daemon() -> None:
    """A call only queues: 5000 calls return while the sender is stuck on a daemon that
    accepted its request and never answers, and they open no connection each. What a call
    costs is bench.sdk_overhead's figure (against a no-op call, daemon up and down), not
    this test's."""
    accepted: list[socket.socket] = []
    request_in = threading.Event()

    def serve(listener: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the listener closed: the test is over
            while True:
                conn, _ = listener.accept()
                accepted.append(conn)
                if b"\r\n\r\n" in conn.recv(65536):  # a request came; no answer ever goes
                    request_in.set()

    with socket.create_server(("127.0.0.1", 0)) as listener:
        server = threading.Thread(target=serve, args=(listener,), daemon=True)
        server.start()
        port = listener.getsockname()[1]
        sdk.init(f"http://127.0.0.1:{port}", timeout=HANG_GUARD_S, retry_for=0.5, concurrency=4)
        sdk.turn_start("warm-up")  # starts the sender thread, which sends it
        assert request_in.wait(HANG_GUARD_S)  # the sender now waits for an answer
        caller = threading.Thread(target=lambda: [sdk.turn_start("s") for _ in range(5000)])
        caller.start()
        caller.join(HANG_GUARD_S)  # a call that waited on the daemon would hang here
        assert not caller.is_alive(), "calls waited for a daemon that never answers"
        st = sdk.stats()
        assert st["sent"] == 0 and st["dropped"] == 0  # all 5001 still queued or in flight
        # No connection per call: only the sender's few requests in flight.
        assert len(accepted) <= 4  # the sender's concurrency
        listener.shutdown(socket.SHUT_RDWR)
    # The daemon goes away: what was in flight fails, then drops. Closed only once the
    # server thread has ended: a connection it accepted but had not yet listed when the
    # list was walked stayed open, unanswered, and flush waited out its 120 s (CI).
    # shutdown() wakes a recv the thread may block in; close() from here would not.
    for conn in list(accepted):
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
    server.join(HANG_GUARD_S)
    assert not server.is_alive()
    for conn in accepted:
        conn.close()
    assert sdk.flush(HANG_GUARD_S)
    st = sdk.stats()
    assert st["sent"] == 0 and st["dropped"] == 5001, st


def test_malformed_params_are_dropped_not_raised(daemon_proc) -> None:
    sdk.init(daemon_proc.url)
    sdk.turn_end("s", {"chunk_hashes": [object()]})  # type: ignore[list-item]
    sdk.turn_end("s", {"chunk_hashes": "not-a-list"})  # the daemon answers ok:false
    assert sdk.flush(120)
    assert sdk.stats()["failed"] == 2


def test_a_turn_end_without_a_list_is_dropped_not_sent(daemon_proc) -> None:
    sdk.init(daemon_proc.url)
    sdk.turn_end("s", {"chunk_hashes": ["a1", "b2"]})
    sdk.turn_end("s", {"chunk_hashes": None})
    sdk.turn_end("s", {"other": 1})
    sdk.turn_end("s")
    assert sdk.flush(120)
    assert sdk.stats()["sent"] == 1 and sdk.stats()["failed"] == 3
    assert daemon_proc.event("session_map", session_id="s")["data"]["chunk_hashes"] == ["a1", "b2"]


def test_flush_waits_for_delivery(daemon_proc) -> None:
    sdk.init(daemon_proc.url)
    for i in range(200):
        sdk.turn_end(f"s{i % 7}", {"chunk_hashes": [f"{i:x}"]})
    assert sdk.flush(120)
    assert sdk.stats()["sent"] == 200
    assert daemon_proc.event("health")["data"]["sessions_count"] == 7


def test_init_once_later_inits_ignored(daemon_proc, tmp_path: Path, caplog) -> None:
    sdk.init(daemon_proc.url)
    other = tmp_path / "c.toml"
    other.write_text('daemon_url = "http://127.0.0.1:1"\n')
    with caplog.at_level(logging.WARNING, logger="ramakv_sdk"):
        sdk.init_from_path(other)
    assert "already initialised" in caplog.text
    sdk.turn_start("s")
    assert sdk.flush(120) and sdk.stats()["sent"] == 1


def test_missing_or_broken_config_disables(tmp_path: Path) -> None:
    assert not sdk.is_enabled()
    bad = tmp_path / "bad.toml"
    bad.write_text("daemon_url = ")
    sdk.init_from_path(bad)
    assert not sdk.is_enabled()
    sdk.turn_start("s")  # a no-op
    assert sdk.flush(1) and sdk.stats()["sent"] == 0
    _reset_for_tests()
    sdk.init_from_path(tmp_path / "missing.toml")
    assert not sdk.is_enabled()


def test_init_from_config_honours_xdg(daemon_proc, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "ram-a-kv").mkdir()
    (tmp_path / "ram-a-kv" / "config.toml").write_text(f'daemon_url = "{daemon_proc.url}"\n')
    sdk.init_from_config()
    assert sdk.is_enabled()
    sdk.turn_end("x", {"chunk_hashes": ["-7f"]})
    assert sdk.flush(120)
    assert daemon_proc.event("session_map", session_id="x")["data"]["chunk_hashes"] == ["-7f"]


async def test_calls_from_inside_an_event_loop_do_not_block_it(daemon_proc) -> None:
    sdk.init(daemon_proc.url)
    # With the daemon stopped, a call that waited for it would hang here (and time the test
    # out); fire-and-forget calls must all return at once, whatever the machine's load.
    daemon_proc.proc.send_signal(signal.SIGSTOP)
    try:
        for i in range(300):
            sdk.turn_start(f"s{i % 10}")
    finally:
        daemon_proc.proc.send_signal(signal.SIGCONT)
    assert await asyncio.to_thread(sdk.flush, 120)
    assert sdk.stats()["sent"] == 300


def test_a_forked_child_sends_with_its_own_thread(daemon_proc) -> None:
    import os

    sdk.init(daemon_proc.url)
    sdk.turn_start("parent")
    assert sdk.flush(120)
    pid = os.fork()
    if pid == 0:  # the child: its first call starts a new sender thread
        code = 1
        try:
            sdk.turn_end("child", {"chunk_hashes": ["c0"]})
            code = 0 if sdk.flush(120) and sdk.stats()["sent"] == 2 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert daemon_proc.event("session_map", session_id="child")["data"]["chunk_hashes"] == ["c0"]


def test_restore_from_another_session_waits_for_its_events(daemon_proc) -> None:
    sdk.init(daemon_proc.url)
    for i in range(20):
        sdk.turn_end("src", {"chunk_hashes": [f"{i:x}", "ab"]})
    sdk.session_suspend("src")
    sdk.snapshot_restore("dst", source_session_id="src")
    assert sdk.flush(120)
    assert sdk.stats()["failed"] == 0
    assert daemon_proc.event("session_map", session_id="dst")["data"]["chunk_hashes"] == [
        "13",
        "ab",
    ]


def test_events_made_during_a_restart_are_delivered_in_order(daemon_proc) -> None:
    sdk.init(daemon_proc.url, retry_for=30.0)
    sdk.turn_end("r", {"chunk_hashes": ["a0"]})
    assert sdk.flush(120)
    daemon_proc.kill()
    for i in range(1, 6):
        sdk.turn_start("r")  # a hint: dropped while the daemon is away
        sdk.turn_end("r", {"chunk_hashes": [f"a{i}"]})
    sdk.session_fork("r")
    # The sender has tried while the daemon was away (its first hint was dropped).
    for _ in range(int(HANG_GUARD_S / 0.01)):  # a hang guard, not a time bound
        if sdk.stats()["dropped_unavailable"]:
            break
        time.sleep(0.01)
    assert sdk.stats()["dropped_unavailable"] >= 1
    daemon_proc.start()  # same port, same SQLite file
    assert sdk.flush(120)
    st = sdk.stats()
    # every state change landed; the turn_start hints were sent or dropped, depending on
    # whether they were tried while the daemon was away
    assert st["sent"] >= 7 and st["sent"] + st["dropped_unavailable"] == 12
    assert st["failed"] == 0
    rows = daemon_proc.event("list_sessions")["data"]["sessions"]
    assert rows == [
        {**rows[0], "session_id": "r", "turn_count": 6, "chunk_count": 1, "fork_holds": 1}
    ]
    assert daemon_proc.event("session_map", session_id="r")["data"]["chunk_hashes"] == ["a5"]


async def test_a_timed_out_event_is_retried_with_the_same_event_id(unused_tcp_port) -> None:
    """A stand-in daemon that answers the first try only once the retry came (after the
    client's timeout, "maybe applied"): the retry carries its id."""
    from aiohttp import web

    from ramakv_sdk.sender import EventSender

    seen: list[dict] = []
    retried = asyncio.Event()

    async def event(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        if len(seen) == 1:
            await asyncio.wait_for(retried.wait(), HANG_GUARD_S)  # too late, whatever the load
        else:
            retried.set()
        return web.json_response({"ok": True, "type": body["type"], "data": {}})

    app = web.Application()
    app.router.add_post("/event", event)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        sender = EventSender(AsyncClient(f"http://127.0.0.1:{unused_tcp_port}", timeout=0.3))
        sender.submit({"type": "session_fork_end", "session_id": "f"})
        sender.submit({"type": "turn_start", "session_id": "f"})
        assert await sender.flush(120)
        await sender.aclose()
    finally:
        await runner.cleanup()
    assert [b["type"] for b in seen] == ["session_fork_end", "session_fork_end", "turn_start"]
    assert seen[0]["event_id"] == seen[1]["event_id"] and len(seen[0]["event_id"]) == 32
    assert "event_id" not in seen[2]
    assert sender.stats.sent == 2 and sender.stats.dropped == 0
