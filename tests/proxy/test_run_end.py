"""An agent's final answer ends its run: the proxy closes the session ``run_end_close_s``
later unless a new request comes first; plain chat (no tools) is not affected. A manual
clock drives the timers; the daemon is real, the engine the stand-in."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from test_lifecycle import ASK, after_tool, chat, daemon_events, state

from ramakv_sdk.proxy import ManualClock


async def run_to_final_answer(proxy, sid: str, stream: bool = False) -> dict[str, Any]:  # noqa: ANN001
    """A tool call, then the tool's result answered in words: the agent's run is over."""
    first = await chat(proxy, ASK, sid)
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    final = after_tool(first["choices"][0]["message"])
    if not stream:
        answer = await chat(proxy, final, sid)
        assert answer["choices"][0]["finish_reason"] == "stop"
        assert not answer["choices"][0]["message"].get("tool_calls")
        return final
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/chat/completions",
            json={**final, "stream": True},
            headers={"X-Session-ID": sid},
        ) as r:
            assert r.status == 200
            raw = await r.read()
    assert b"[DONE]" in raw and b"tool_calls" not in raw
    return final


async def test_a_final_answer_closes_the_session_after_the_grace(
    daemon_proc, engine, start_proxy, caplog
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_close_s=5)
    await run_to_final_answer(proxy, "done")
    assert await proxy.sender.flush(120)
    assert proxy.lifecycle.state_of("done") == "run_end"
    clock.advance(4.99)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "done") == "active"
    with caplog.at_level(logging.INFO, logger="ramakv_proxy"):
        clock.advance(0.01)
        assert await proxy.sender.flush(120)
    assert state(daemon_proc, "done") is None
    assert proxy.lifecycle.state_of("done") is None and proxy.lifecycle.sessions == 0
    assert any(
        "closed 5 s after its final answer (the agent's run ended)" in r.getMessage()
        for r in caplog.records
    )
    assert (await daemon_events(daemon_proc, "done"))[-3:] == [
        ("turn_start", None),
        ("turn_end", None),
        ("session_close", "run_end"),
    ]
    st = proxy.lifecycle.stats
    assert (st.closes_run_end, st.run_end_cancelled, st.closes_idle) == (1, 0, 0)
    assert clock.pending == 0  # the idle timer went with the session
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{proxy.url}/_ramakv/stats") as r:
            life = (await r.json())["lifecycle"]
        async with http.get(f"{proxy.url}/_ramakv/metrics") as r:
            text = await r.text()
    assert (life["closes_run_end"], life["run_end_cancelled"]) == (1, 0)
    assert "ramakv_proxy_closes_run_end_total 1.0" in text
    assert "ramakv_proxy_run_end_cancelled_total 0.0" in text


async def test_a_streamed_final_answer_ends_the_run_too(daemon_proc, engine, start_proxy) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_close_s=1)
    await run_to_final_answer(proxy, "streamed", stream=True)
    clock.advance(1)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "streamed") is None
    assert proxy.lifecycle.stats.closes_run_end == 1


async def test_a_request_within_the_grace_keeps_the_session(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_close_s=5)
    final = await run_to_final_answer(proxy, "goes-on")
    clock.advance(4)
    # The client asks again (a retry, a guardrail's check): the run was not over.
    await chat(proxy, final, "goes-on")
    assert proxy.lifecycle.stats.run_end_cancelled == 1
    clock.advance(4.99)  # the first grace long past; the second not yet
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "goes-on") == "active"
    assert proxy.lifecycle.stats.closes_run_end == 0
    clock.advance(0.01)  # this answer was final too: its own grace ends
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "goes-on") is None
    types = [t for t, _ in await daemon_events(daemon_proc, "goes-on")]
    assert types.count("session_close") == 1


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": ASK["messages"]},  # plain chat: no tools offered
        {**ASK, "tool_choice": "none"},  # tools offered, never used: an answer in a chat
    ],
    ids=["no-tools", "tools-unused"],
)
async def test_chat_without_tool_use_is_not_closed(
    daemon_proc, engine, start_proxy, body: dict[str, Any]
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_close_s=5)
    answer = await chat(proxy, body, "chat")
    assert not answer["choices"][0]["message"].get("tool_calls")
    assert proxy.lifecycle.state_of("chat") == "idle"
    clock.advance(600)  # far past the grace, short of the idle close
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "chat") == "active"
    assert proxy.lifecycle.stats.closes_run_end == 0


async def test_run_end_close_zero_never_closes(daemon_proc, engine, start_proxy) -> None:
    clock = ManualClock()
    proxy = await start_proxy(
        engine.url, daemon_proc.url, clock=clock, run_end_close_s=0, session_idle_close_s=0
    )
    await run_to_final_answer(proxy, "kept")
    clock.advance(3600)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "kept") == "active"
    assert proxy.lifecycle.stats.closes_run_end == 0 and proxy.lifecycle.sessions == 0
    assert clock.pending == 0
