"""Issue 31, the proxy's part: each defect found by attacking the proxy, reproduced on the
stand-in engine with a real daemon (a hung stand-in daemon for the breaker), timers on a
manual clock: side calls, retries, a hung daemon, a restart, request ids, client strings."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import aiohttp
from support.openai_engine import chunk_hashes, prompt_of
from test_lifecycle import ASK, chat, daemon_events, state
from test_run_end import record_sent

from ramakv_proxy import ManualClock

PLAIN = {"model": "m", "messages": ASK["messages"]}
GUARDRAIL = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "Decide whether the user's request is allowed."},
        ASK["messages"][1],
    ],
}
HANG_GUARD_S = 120.0  # only a guard against a hang: each wait ends on a condition


def session_map(daemon, sid: str) -> list[str] | None:  # noqa: ANN001
    answer = daemon.event("session_map", session_id=sid)
    return answer["data"]["chunk_hashes"] if answer["ok"] else None


async def until(check, what: str) -> None:  # noqa: ANN001
    """Wait for a condition (polled on the event loop), never for a time."""
    for _ in range(int(HANG_GUARD_S / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


async def test_a_side_call_is_a_branch_and_keeps_the_sessions_map(
    daemon_proc, engine, start_proxy
) -> None:
    """A guardrail's call under the run's session id replaced the session's map (22 of 22
    context chunks lost); now it goes to <sid>#branch, closed (inferred) after its answer."""
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock)
    sent = record_sent(proxy)
    await chat(proxy, PLAIN, "run")
    await chat(proxy, GUARDRAIL, "run")
    assert await proxy.sender.flush(120)
    assert session_map(daemon_proc, "run") == chunk_hashes(prompt_of(PLAIN))
    assert state(daemon_proc, "run") == "active"
    assert state(daemon_proc, "run#branch") is None
    branch = await daemon_events(daemon_proc, "run#branch")
    assert branch == [("turn_start", None), ("turn_end", None), ("session_close", "branch_end")]
    assert sent[-1] == {
        "type": "session_close",
        "session_id": "run#branch",
        "reason": "branch_end",
        "inferred": True,
    }
    st = proxy.lifecycle.stats
    assert (st.branches, st.closes_branch) == (1, 1)
    # The run's next step extends its context: the session again, not a branch.
    longer = {**PLAIN, "messages": [*PLAIN["messages"], {"role": "assistant", "content": "ok"}]}
    await chat(proxy, longer, "run")
    assert await proxy.sender.flush(120)
    assert session_map(daemon_proc, "run") == chunk_hashes(prompt_of(longer))
    assert proxy.lifecycle.stats.branches == 1


async def test_a_retry_after_a_client_timeout_keeps_the_session(
    daemon_proc, engine, start_proxy
) -> None:
    """A client times out mid-stream and retries: the retry is answered, then the abandoned
    stream is noticed. It closed the session (client_disconnected); now the newer request
    supersedes the disconnect."""
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock)
    await chat(proxy, PLAIN, "retry")  # the daemon knows the session
    async with aiohttp.ClientSession() as http:
        r = await http.post(
            f"{proxy.url}/v1/chat/completions",
            json={**PLAIN, "stream": True},
            headers={"X-Session-ID": "retry", "X-Engine-Hold": "abandoned"},
        )
        await r.content.readany()
        r.close()  # the client's timeout
        await until(proxy.clients_gone, "the proxy saw the client go")
    await chat(proxy, PLAIN, "retry")  # the retry, answered
    engine.hold("abandoned").allow(2)  # the abandoned stream's next write fails
    await until(lambda: proxy.lifecycle.state_of("retry") != "in_flight", "the stream ended")
    engine.hold("abandoned").release()
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "retry") == "active"
    st = proxy.lifecycle.stats
    assert (st.closes_disconnect, st.disconnects_superseded) == (0, 1)
    assert "session_close" not in [t for t, _ in await daemon_events(daemon_proc, "retry")]


async def test_a_hung_daemon_costs_a_request_at_most_the_bound_then_nothing(
    engine, start_proxy, caplog
) -> None:
    """Daemon hung (SIGSTOP): every request of a new session waited 3 s (the state question
    and the end's wait), every time. Now at most --daemon-wait-ms, once; then the breaker
    is open and requests wait on nothing, until its back-off lets one try again."""
    asked = asyncio.Event()
    conns: list[asyncio.StreamWriter] = []

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(writer)
        await reader.readline()
        asked.set()
        await reader.read()  # never answers; ends when the proxy hangs up

    hung = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = hung.sockets[0].getsockname()[1]
    clock = ManualClock()
    proxy = await start_proxy(
        engine.url,
        f"http://127.0.0.1:{port}",
        clock=clock,
        daemon_wait_ms=250,
        daemon_timeout=HANG_GUARD_S,
        retry_for=0,
    )
    try:
        first = asyncio.ensure_future(chat(proxy, PLAIN, "h1"))
        with caplog.at_level(logging.WARNING, logger="ramakv_proxy"):
            await asyncio.wait_for(asked.wait(), HANG_GUARD_S)  # the proxy asks, and waits
            assert not first.done()
            clock.advance(0.25)  # the bound
            await asyncio.wait_for(first, HANG_GUARD_S)
        st = proxy.lifecycle.stats
        assert st.daemon_timeouts == 1 and proxy.lifecycle.breaker.is_open
        assert any("daemon did not answer in time" in r.getMessage() for r in caplog.records)
        # The breaker is open: a new session's request waits on nothing (no clock moves).
        await asyncio.wait_for(chat(proxy, PLAIN, "h2"), HANG_GUARD_S)
        assert st.daemon_timeouts == 1 and st.daemon_waits_skipped >= 2
        clock.advance(1.0)  # the back-off: one request may try again
        assert proxy.lifecycle.breaker.allow()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{proxy.url}/_ramakv/stats") as r:
                life = (await r.json())["lifecycle"]
        assert life["daemon_timeouts"] == 1 and life["breaker_opens"] == 1
    finally:
        for w in conns:
            w.close()
        hung.close()


async def test_pending_suspends_survive_a_proxy_restart(
    daemon_proc, engine, start_proxy, tmp_path: Path
) -> None:
    """A proxy restart forgot every pending suspend and close; now they are kept in a file
    written atomically and armed again by the next proxy."""
    state_file = tmp_path / "proxy-state" / "pending-8001.json"
    first = await start_proxy(
        engine.url, daemon_proc.url, clock=ManualClock(), state_file=str(state_file)
    )
    await chat(first, ASK, "paused")  # a tool call: the suspend is pending
    await chat(first, PLAIN, "chatting")  # an answer: the idle close is pending
    assert await first.sender.flush(120)
    await first.runner.cleanup()
    doc = json.loads(state_file.read_text())
    assert set(doc["sessions"]) == {"paused", "chatting"}
    assert [p.name for p in state_file.parent.iterdir()] == [state_file.name]  # no temporary
    clock = ManualClock()
    second = await start_proxy(engine.url, daemon_proc.url, clock=clock, state_file=str(state_file))
    assert second.lifecycle.state_of("paused") == "tool_pause"
    clock.advance(2)
    assert await second.sender.flush(120)
    assert state(daemon_proc, "paused") == "suspended"
    clock.advance(900)
    assert await second.sender.flush(120)
    assert state(daemon_proc, "chatting") is None  # the idle close came too
    assert second.lifecycle.stats.closes_idle == 2 and second.lifecycle.sessions == 0


async def test_turn_start_and_turn_end_carry_the_requests_id(
    daemon_proc, engine, start_proxy
) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    sent = record_sent(proxy)
    await chat(proxy, PLAIN, "ids")
    await chat(proxy, {**PLAIN, "stream": False}, "ids")
    assert await proxy.sender.flush(120)
    starts = [e["request_id"] for e in sent if e["type"] == "turn_start"]
    ends = [e["request_id"] for e in sent if e["type"] == "turn_end"]
    assert starts == ends and len(set(starts)) == 2
    assert all(isinstance(i, str) and 0 < len(i) <= 128 for i in starts)
    assert state(daemon_proc, "ids") == "active"  # the daemon takes the field


async def test_a_session_id_with_a_newline_forges_no_log_line(
    daemon_proc, engine, start_proxy, caplog
) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    forged = "evil\n2026-01-01 00:00:00 INFO ramakv_proxy: session admin closed"
    with caplog.at_level(logging.INFO, logger="ramakv_proxy"):
        async with aiohttp.ClientSession() as http:
            body = {**PLAIN, "user": forged}
            async with http.post(f"{proxy.url}/v1/chat/completions", json=body) as r:
                assert r.status == 200  # forwarded all the same, just not reported
    assert await proxy.sender.flush(120)
    assert all("\n" not in r.getMessage() for r in caplog.records)
    assert any("control characters" in r.getMessage() for r in caplog.records)
    listed = daemon_proc.event("list_sessions")["data"]["sessions"]
    assert not any("evil" in s["session_id"] for s in listed)


async def test_header_and_body_ids_are_normalised_alike(daemon_proc, engine, start_proxy) -> None:
    """A padded header id and the same body id were two sessions."""
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/chat/completions", json=PLAIN, headers={"X-Session-ID": " pad "}
        ) as r:
            assert r.status == 200
        async with http.post(
            f"{proxy.url}/v1/chat/completions", json={**PLAIN, "session_id": "pad\t"}
        ) as r:
            assert r.status == 200
    assert await proxy.sender.flush(120)
    listed = {s["session_id"] for s in daemon_proc.event("list_sessions")["data"]["sessions"]}
    assert "pad" in listed and " pad " not in listed and "pad\t" not in listed
    types = [t for t, _ in await daemon_events(daemon_proc, "pad")]
    assert types.count("turn_end") == 2


async def test_scope_sessions_by_key_keeps_callers_apart(daemon_proc, engine, start_proxy) -> None:
    proxy = await start_proxy(
        engine.url, daemon_proc.url, clock=ManualClock(), scope_sessions_by_key=True
    )
    async with aiohttp.ClientSession() as http:
        for key in ("sk-alice", "sk-mallory"):
            headers = {"X-Session-ID": "shared", "Authorization": f"Bearer {key}"}
            async with http.post(
                f"{proxy.url}/v1/chat/completions", json=PLAIN, headers=headers
            ) as r:
                assert r.status == 200
    assert await proxy.sender.flush(120)
    listed = {s["session_id"] for s in daemon_proc.event("list_sessions")["data"]["sessions"]}
    scoped = {s for s in listed if s.endswith(":shared")}
    assert len(scoped) == 2 and "shared" not in listed
    # The engine saw the request unchanged (the scoping is the proxy's and the daemon's).
    assert {r["headers"].get("X-Session-ID") for r in engine.requests[-2:]} == {"shared"}
