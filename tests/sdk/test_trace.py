"""subscribe_trace: snapshot then events, resuming across drops (restart, 4008), backoff
and the distinct errors (401, protocol mismatch, too large, unreachable)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from ramakv_sdk import AsyncClient
from ramakv_sdk.errors import TraceProtocolMismatch, TraceUnauthorized


async def next_msg(sub, timeout: float = 120.0) -> dict[str, Any]:
    return await asyncio.wait_for(sub.__anext__(), timeout)


async def test_snapshot_then_events_and_session_filter(daemon_proc) -> None:
    async with AsyncClient(daemon_proc.url) as c:
        await c.turn_end("a", {"chunk_hashes": ["aa"]})
        async with c.subscribe_trace(session="b") as sub:
            snap = await next_msg(sub)
            assert snap["kind"] == "snapshot" and snap["totals"]["sessions"] == 0
            part = await next_msg(sub)
            assert part["kind"] == "snapshot_sessions" and part["sessions"] == []
            assert part["last"] is True
            await c.turn_end("a", {"chunk_hashes": ["ab"]})
            await c.turn_end("b", {"chunk_hashes": ["bb"]})
            ev = await next_msg(sub)
            assert (ev["kind"], ev["type"], ev["session_id"]) == ("event", "turn_end", "b")
            assert ev["delta"]["refcounts"] == {"bb": 1}
            assert sub.last_seq == ev["seq"]


async def test_after_a_restart_it_starts_over_from_a_snapshot(daemon_proc) -> None:
    """A restarted daemon numbers from 0 again: an old since could replay the wrong range."""
    async with AsyncClient(daemon_proc.url) as c:
        async with c.subscribe_trace(max_backoff=0.2) as sub:
            assert (await next_msg(sub))["kind"] == "snapshot"
            assert (await next_msg(sub))["kind"] == "snapshot_sessions"
            await c.turn_end("s", {"chunk_hashes": ["aa"]})
            seq = (await next_msg(sub))["seq"]
            daemon_proc.kill()
            down = await next_msg(sub)
            assert down["kind"] == "disconnected" and down["last_seq"] == seq
            daemon_proc.start()  # same port, same SQLite file; its seq starts again at 0
            for i in range(seq + 3):  # the new daemon's seq passes the old one
                daemon_proc.event("turn_start", session_id=f"n{i}")
            back = await next_msg(sub)
            assert back == {"kind": "reconnected", "since": seq, "attempts": back["attempts"]}
            snap = await next_msg(sub)  # another epoch: a snapshot, not a replay
            assert snap["kind"] == "snapshot"
            part = await next_msg(sub)
            assert {r["session_id"]: r["chunk_count"] for r in part["sessions"]}["s"] == 1
            assert sub.reconnects == 1


async def test_first_connection_failure_is_reported_once_then_retried(unused_tcp_port) -> None:
    async with AsyncClient(f"http://127.0.0.1:{unused_tcp_port}") as c:
        sub = c.subscribe_trace(max_backoff=0.05)
        down = await next_msg(sub)
        assert down["kind"] == "disconnected" and down["code"] is None
        assert down["error"] == "unreachable" and "daemon unreachable at" in down["reason"]
        tried = sub.resume.backoff.failures
        nothing = asyncio.ensure_future(sub.__anext__())
        for _ in range(12000):  # a hang guard: wait for three more tries, not for a time
            if sub.resume.backoff.failures >= tried + 3 or nothing.done():
                break
            await asyncio.sleep(0.01)
        assert sub.resume.backoff.failures >= tried + 3
        assert not nothing.done()  # retrying quietly, no marker per attempt
        nothing.cancel()
        await sub.aclose()


async def test_a_drop_resumes_within_the_same_run(daemon_proc, unused_tcp_port) -> None:
    """A TCP relay is cut under the subscriber; the daemon lives on: a replay, no snapshot."""
    host, port = "127.0.0.1", int(daemon_proc.url.rsplit(":", 1)[1])
    conns: list[asyncio.StreamWriter] = []

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    async def relay(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection(host, port)
        conns.extend([w, uw])
        await asyncio.gather(pipe(r, uw), pipe(ur, w))

    server = await asyncio.start_server(relay, "127.0.0.1", unused_tcp_port)
    try:
        async with AsyncClient(daemon_proc.url) as c:
            async with AsyncClient(f"http://127.0.0.1:{unused_tcp_port}") as via:
                async with via.subscribe_trace(max_backoff=0.1) as sub:
                    assert (await next_msg(sub))["kind"] == "snapshot"
                    assert (await next_msg(sub))["kind"] == "snapshot_sessions"
                    await c.turn_end("r", {"chunk_hashes": ["aa"]})
                    seq = (await next_msg(sub))["seq"]
                    for w in conns:
                        w.transport.abort()
                    conns.clear()
                    assert (await next_msg(sub))["kind"] == "disconnected"
                    await c.turn_end("r", {"chunk_hashes": ["bb"]})  # while it is away
                    back = await next_msg(sub)
                    assert back["kind"] == "reconnected" and back["since"] == seq
                    missed = await next_msg(sub)
                    assert missed["kind"] == "event" and missed["seq"] == seq + 1
                    assert missed["delta"]["refcounts"] == {"aa": 0, "bb": 1}
    finally:
        server.close()


async def test_slow_close_4008_resumes_from_last_seq(unused_tcp_port) -> None:
    """A stand-in /trace that drops the first connection with 4008 after two events."""
    queries: list[dict[str, str]] = []

    async def trace(request: web.Request) -> web.WebSocketResponse:
        queries.append(dict(request.query))
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        if len(queries) == 1:
            await ws.send_json({"kind": "snapshot", "seq": 5, "sessions": {}, "refcounts": {}})
            await ws.send_json({"kind": "event", "seq": 6, "type": "health"})
            await ws.close(code=4008, message=b"subscriber too slow")
        else:
            await ws.send_json({"kind": "event", "seq": 7, "type": "health"})
            await ws.receive()
        return ws

    app = web.Application()
    app.router.add_get("/trace", trace)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    try:
        async with AsyncClient(f"http://127.0.0.1:{unused_tcp_port}") as c:
            async with c.subscribe_trace() as sub:
                kinds = [await next_msg(sub) for _ in range(5)]
        assert [m["kind"] for m in kinds] == [
            "snapshot",
            "event",
            "disconnected",
            "reconnected",
            "event",
        ]
        assert kinds[2]["code"] == 4008 and kinds[2]["reason"] == "subscriber too slow"
        assert kinds[3]["since"] == 6 and kinds[4]["seq"] == 7
        assert queries == [{"protocol": "2"}, {"protocol": "2", "since": "6"}]
    finally:
        await runner.cleanup()


async def stand_in(port: int, handler: Callable[[web.Request], Awaitable[Any]]) -> web.AppRunner:
    """A /trace on ``port`` answered by ``handler``."""
    app = web.Application()
    app.router.add_get("/trace", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def test_401_raises_a_distinct_error(daemon_proc_factory) -> None:
    d = daemon_proc_factory(config={"auth_token": "s3cret"})
    async with AsyncClient(d.url, token="wrong") as c:
        with pytest.raises(TraceUnauthorized, match="HTTP 401.*auth token"):
            async with c.subscribe_trace() as sub:
                await next_msg(sub)
    async with AsyncClient(d.url, token="s3cret") as c:
        async with c.subscribe_trace() as sub:
            assert (await next_msg(sub))["kind"] == "snapshot"
    for _ in range(3):  # a follower retrying with a bad token: one log line, not one per try
        async with AsyncClient(d.url, token="wrong") as c:
            with pytest.raises(TraceUnauthorized):
                async with c.subscribe_trace() as sub:
                    await next_msg(sub)
    assert d.log().count("refused: missing or wrong bearer token") == 1
    assert "Traceback" not in d.log()


async def test_protocol_mismatch_raises_with_the_daemons_reason(
    daemon_proc, unused_tcp_port
) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as http:  # a client of another version
        async with http.ws_connect(f"{daemon_proc.url}/trace?protocol=1") as ws:
            msg = await ws.receive(timeout=120)
            assert ws.close_code == 4010 and "protocol 2 required" in msg.extra

    async def old_daemon(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.close(code=4010, message=b"trace protocol 3 required")
        return ws

    port = unused_tcp_port  # the daemon's port + 1 could belong to another process
    runner = await stand_in(port, old_daemon)
    try:
        async with AsyncClient(f"http://127.0.0.1:{port}") as c:
            with pytest.raises(TraceProtocolMismatch, match="protocol 3 required"):
                async with c.subscribe_trace() as sub:
                    await next_msg(sub)
    finally:
        await runner.cleanup()


async def test_a_handshake_alone_does_not_reset_the_backoff(unused_tcp_port) -> None:
    """Accepting and closing at once (as a daemon did when its snapshot was too large)
    must not be retried at the shortest delay; a message resets it."""
    tries: list[float] = []

    async def flaky(request: web.Request) -> web.WebSocketResponse:
        tries.append(asyncio.get_running_loop().time())
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        if len(tries) >= 5:
            await ws.send_json({"kind": "event", "seq": 1, "type": "health"})
            await ws.receive()
        await ws.close(code=1011, message=b"boom")
        return ws

    runner = await stand_in(unused_tcp_port, flaky)
    try:
        async with AsyncClient(f"http://127.0.0.1:{unused_tcp_port}") as c:
            async with c.subscribe_trace(max_backoff=10.0) as sub:
                assert (await next_msg(sub))["kind"] == "disconnected"
                attempts = []
                while True:
                    msg = await next_msg(sub, timeout=30)
                    attempts.append(sub._attempt)
                    if msg["kind"] == "event":
                        break
                assert sub._attempt == 0  # data flowed
                assert max(attempts) >= 4  # each accept-then-close counted as a failure
        gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
        assert gaps[-1] > gaps[0]  # doubling (jitter draws from half to all of it)
    finally:
        await runner.cleanup()


async def test_a_message_over_the_limit_is_reported_as_too_large(unused_tcp_port) -> None:
    async def huge(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str('"' + "x" * 2000 + '"')
        await ws.receive()
        return ws

    runner = await stand_in(unused_tcp_port, huge)
    try:
        async with AsyncClient(f"http://127.0.0.1:{unused_tcp_port}") as c:
            sub = c.subscribe_trace()
            sub.max_msg_size = 1000
            down = await next_msg(sub)
            assert down["kind"] == "disconnected" and down["error"] == "too_large"
            assert "larger than this client's limit of 1000 bytes" in down["reason"]
            await sub.aclose()
    finally:
        await runner.cleanup()
