"""The session lifecycle the proxy infers: tool pause -> suspend, next request -> restore,
client gone or idle -> close. A manual clock drives the timers; the daemon is real."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from support.trace_events import lifecycle_events, session_records

from ramakv_proxy import ManualClock

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "list_files",
            "description": "List the files under a path",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
ASK = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are a careful agent with a long shared prompt."},
        {"role": "user", "content": "List the files in the repository, then summarise them."},
    ],
    "tools": TOOLS,
}


def after_tool(answer_message: dict[str, Any]) -> dict[str, Any]:
    """The agent's next request: the tool call and its result appended."""
    call = answer_message["tool_calls"][0]
    return {
        **ASK,
        "messages": [
            *ASK["messages"],
            answer_message,
            {"role": "tool", "tool_call_id": call["id"], "content": "README.md setup.py"},
        ],
    }


async def chat(proxy, body: dict, sid: str) -> dict:  # noqa: ANN001
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/chat/completions", json=body, headers={"X-Session-ID": sid}
        ) as r:
            assert r.status == 200
            return await r.json()


def state(daemon, sid: str) -> str | None:  # noqa: ANN001
    listed = daemon.event("list_sessions")["data"]["sessions"]
    return next((s["state"] for s in listed if s["session_id"] == sid), None)


async def daemon_events(daemon, sid: str) -> list[tuple[str, Any]]:  # noqa: ANN001
    """(type, notes.reason or None) of the session's changing events on the trace."""
    return await lifecycle_events(daemon.url, sid)


async def test_tool_pause_suspends_after_the_grace_and_the_next_request_restores(
    daemon_proc, engine, start_proxy, caplog
) -> None:
    clock = ManualClock()
    # run_end_grace_s=0: the final answer's close (tests/proxy/test_run_end.py) stays out
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=0)
    first = await chat(proxy, ASK, "agent")
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    assert await proxy.sender.flush(120)
    assert proxy.lifecycle.state_of("agent") == "tool_pause"
    clock.advance(1.99)  # the tool still runs: nothing yet
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "agent") == "active"
    with caplog.at_level(logging.INFO, logger="ramakv_proxy"):
        clock.advance(0.01)
        assert await proxy.sender.flush(120)
    assert state(daemon_proc, "agent") == "suspended"
    assert proxy.lifecycle.state_of("agent") == "suspended"
    assert any("suspended after a 2 s tool pause" in r.getMessage() for r in caplog.records)
    second = await chat(proxy, after_tool(first["choices"][0]["message"]), "agent")
    assert second["choices"][0]["finish_reason"] == "stop"  # the tool result answered in words
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "agent") == "active"
    assert await daemon_events(daemon_proc, "agent") == [
        ("turn_start", None),
        ("turn_end", None),
        ("session_suspend", "tool_pause"),
        ("snapshot_restore", "next_request"),
        ("turn_start", None),
        ("turn_end", None),
    ]
    st = proxy.lifecycle.stats
    assert (st.tool_calls, st.suspends, st.restores, st.suspends_cancelled) == (1, 1, 1, 0)
    assert st.restore_unknown == 1  # a noop backend cannot say where chunks are: no wait
    clock.advance(60)  # an answer in words: no tool pause, so no suspend
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "agent") == "active"


async def test_a_request_within_the_grace_cancels_the_suspend(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=0)
    first = await chat(proxy, ASK, "quick")
    clock.advance(1.0)
    await chat(proxy, after_tool(first["choices"][0]["message"]), "quick")
    clock.advance(10.0)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "quick") == "active"
    st = proxy.lifecycle.stats
    assert (st.suspends, st.suspends_cancelled, st.restores) == (0, 1, 0)
    types = [t for t, _ in await daemon_events(daemon_proc, "quick")]
    assert "session_suspend" not in types and "snapshot_restore" not in types


async def test_grace_zero_never_suspends(daemon_proc, engine, start_proxy) -> None:
    clock = ManualClock()
    proxy = await start_proxy(
        engine.url, daemon_proc.url, clock=clock, tool_pause_suspend_s=0, session_idle_close_s=0
    )
    await chat(proxy, ASK, "never")
    clock.advance(3600)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "never") == "active"
    assert proxy.lifecycle.stats.tool_calls == 1 and proxy.lifecycle.sessions == 0
    assert clock.pending == 0  # nothing scheduled, nothing remembered


@pytest.mark.parametrize("stream", [False, True])
async def test_streamed_and_plain_tool_calls_both_pause(
    daemon_proc, engine, start_proxy, stream: bool
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, tool_pause_suspend_s=0.5)
    named = {
        **ASK,
        "stream": stream,
        "tool_choice": {"type": "function", "function": {"name": "list_files"}},
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/chat/completions", json=named, headers={"X-Session-ID": "s"}
        ) as r:
            raw = await r.read()
    assert b'"list_files"' in raw
    clock.advance(0.5)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "s") == "suspended"


async def test_idle_sessions_are_closed(daemon_proc, engine, start_proxy) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, session_idle_close_s=300)
    plain = {"model": "m", "messages": ASK["messages"]}
    await chat(proxy, plain, "idle")
    clock.advance(299)
    await chat(proxy, plain, "idle")  # a request restarts the idle clock
    clock.advance(299)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "idle") == "active"
    clock.advance(1)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "idle") is None
    assert proxy.lifecycle.stats.closes_idle == 1 and proxy.lifecycle.sessions == 0
    assert (await daemon_events(daemon_proc, "idle"))[-1] == ("session_close", "idle")


async def test_a_suspended_session_idle_too_long_is_closed(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, session_idle_close_s=60)
    await chat(proxy, ASK, "paused")
    clock.advance(2)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "paused") == "suspended"
    clock.advance(58)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "paused") is None
    types = [t for t, _ in await daemon_events(daemon_proc, "paused")]
    assert types[-2:] == ["session_suspend", "session_close"]


async def test_a_client_leaving_mid_stream_closes_its_session(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock)
    async with aiohttp.ClientSession() as http:
        # a first whole turn, so the daemon knows the session
        await chat(proxy, {"model": "m", "messages": ASK["messages"]}, "gone")
        r = await http.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "m", "messages": ASK["messages"], "stream": True},
            headers={"X-Session-ID": "gone", "X-Engine-Hold": "gone"},
        )
        await r.content.readany()
        r.close()  # drop the connection mid-stream, while the engine holds the rest
        # The proxy notices at its next write to the client: once it has seen the client
        # go, the engine sends one more chunk on its own; then wait for the close itself.
        for _ in range(2400):  # hang guard (a loaded machine), not a time bound
            if proxy.clients_gone():
                break
            await engine_tick()
        engine.hold("gone").allow(2)
        for _ in range(2400):  # hang guard (a loaded machine), not a time bound
            if proxy.lifecycle.stats.closes_disconnect:
                break
            await engine_tick()
        engine.hold("gone").release()
    assert await proxy.sender.flush(120)
    assert proxy.lifecycle.stats.closes_disconnect == 1
    assert state(daemon_proc, "gone") is None
    assert (await daemon_events(daemon_proc, "gone"))[-1] == (
        "session_close",
        "client_disconnected",
    )


async def engine_tick() -> None:
    import asyncio

    await asyncio.sleep(0.05)


async def test_conversation_id_names_the_session(daemon_proc, engine, start_proxy) -> None:
    """vLLM's benchmarks/multi_turn --send-conversation-id sends conversation_id."""
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    body = {"model": "m", "messages": ASK["messages"], "conversation_id": "conv-7", "user": "u"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{proxy.url}/v1/chat/completions", json=body) as r:
            assert r.status == 200
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "conv-7") == "active" and state(daemon_proc, "u") is None


async def test_stats_and_metrics_show_the_decisions(daemon_proc, engine, start_proxy) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock)
    await chat(proxy, ASK, "m1")
    clock.advance(2)
    assert await proxy.sender.flush(120)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{proxy.url}/_ramakv/stats") as r:
            st = await r.json()
        async with http.get(f"{proxy.url}/_ramakv/metrics") as r:
            text = await r.text()
    assert st["lifecycle"]["suspends"] == 1 and st["lifecycle"]["tool_calls"] == 1
    assert st["lifecycle"]["sessions"] == 1 and st["sent"] == 3
    assert "ramakv_proxy_suspends_total 1.0" in text
    assert 'ramakv_proxy_events_total{outcome="sent"} 3.0' in text
    assert 'ramakv_proxy_restores_total{wait="landed"} 0.0' in text


async def test_turn_start_prefetch_off_by_default_and_wait_on_request(
    daemon_proc, engine, start_proxy
) -> None:
    """The proxy's turn_start asks for no prefetch unless --turn-start-prefetch wait."""
    plain = {"model": "m", "messages": ASK["messages"]}

    async def prefetches(sid: str) -> list[bool]:
        records = await session_records(daemon_proc.url, sid)
        return [m["data"]["prefetch_sent"] for m in records if m["type"] == "turn_start"]

    off = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    waits = await start_proxy(
        engine.url, daemon_proc.url, clock=ManualClock(), turn_start_prefetch="wait"
    )
    for proxy, sid in ((off, "off"), (waits, "waits")):
        await chat(proxy, plain, sid)
        await chat(proxy, plain, sid)  # the second turn_start finds a map to prefetch
        assert await proxy.sender.flush(120)
    assert await prefetches("off") == [False, False]
    assert await prefetches("waits") == [False, True]  # the first: an unknown session
