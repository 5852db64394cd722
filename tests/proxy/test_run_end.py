"""An agent's final answer ends its run: the proxy closes the session ``run_end_grace_s``
later unless a new request comes first; plain chat (no tools) is not affected. A manual
clock drives the timers; the daemon is real, the engine the stand-in."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from test_lifecycle import ASK, after_tool, chat, daemon_events, state

from ramakv_proxy import ManualClock


def record_sent(proxy) -> list[dict[str, Any]]:  # noqa: ANN001
    """Every event the proxy hands its sender from now on (fire-and-forget or awaited)."""
    sent: list[dict[str, Any]] = []
    sender = proxy.sender
    submit, submit_wait = sender.submit, sender.submit_wait

    def spy(event):  # noqa: ANN001, ANN202
        sent.append(dict(event))
        return submit(event)

    def spy_wait(event):  # noqa: ANN001, ANN202
        sent.append(dict(event))
        return submit_wait(event)

    sender.submit, sender.submit_wait = spy, spy_wait  # type: ignore[method-assign]
    return sent


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


async def test_a_final_answer_suspends_the_session_inferred_after_the_grace(
    daemon_proc, engine, start_proxy, caplog
) -> None:
    """Issue 31 item 1: a run end closed the session (its chunks deleted); now an inferred
    suspend (its chunks ordered cold, kept)."""
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=5)
    sent = record_sent(proxy)
    await run_to_final_answer(proxy, "done")
    assert await proxy.sender.flush(120)
    assert proxy.lifecycle.state_of("done") == "run_end"
    clock.advance(4.99)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "done") == "active"
    with caplog.at_level(logging.INFO, logger="ramakv_proxy"):
        clock.advance(0.01)
        assert await proxy.sender.flush(120)
    assert state(daemon_proc, "done") == "suspended"  # kept, not closed
    assert proxy.lifecycle.state_of("done") == "suspended"
    assert any(
        "suspended (inferred) 5 s after its final answer" in r.getMessage() for r in caplog.records
    )
    assert (await daemon_events(daemon_proc, "done"))[-3:] == [
        ("turn_start", None),
        ("turn_end", None),
        ("session_suspend", "run_end"),
    ]
    assert sent[-1] == {
        "type": "session_suspend",
        "session_id": "done",
        "reason": "run_end",
        "inferred": True,
    }
    assert not any(e["type"] == "session_close" for e in sent)
    st = proxy.lifecycle.stats
    assert (st.suspends_run_end, st.run_end_cancelled, st.closes_idle) == (1, 0, 0)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{proxy.url}/_ramakv/stats") as r:
            life = (await r.json())["lifecycle"]
        async with http.get(f"{proxy.url}/_ramakv/metrics") as r:
            text = await r.text()
    assert "closes_run_end" not in life
    assert (life["suspends_run_end"], life["run_end_cancelled"]) == (1, 0)
    assert life["run_end_mispredictions"] == 0 and life["run_end_grace_s"] == 5.0
    assert "ramakv_proxy_suspends_run_end_total 1.0" in text
    assert "ramakv_proxy_run_end_cancelled_total 0.0" in text
    assert "ramakv_proxy_run_end_mispredictions_total 0.0" in text


async def test_a_streamed_final_answer_ends_the_run_too(daemon_proc, engine, start_proxy) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=1)
    await run_to_final_answer(proxy, "streamed", stream=True)
    clock.advance(1)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "streamed") == "suspended"
    assert proxy.lifecycle.stats.suspends_run_end == 1


async def test_a_request_within_the_grace_keeps_the_session(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=5)
    final = await run_to_final_answer(proxy, "goes-on")
    clock.advance(4)
    # The client asks again (a retry, the user's next message): the run was not over.
    await chat(proxy, final, "goes-on")
    assert proxy.lifecycle.stats.run_end_cancelled == 1
    # The return gap (4 s) is the only one seen: the grace follows it.
    assert proxy.lifecycle.grace.seconds == 4.0
    clock.advance(3.99)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "goes-on") == "active"
    assert proxy.lifecycle.stats.suspends_run_end == 0
    clock.advance(0.01)  # this answer was final too: its own (adapted) grace ends
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "goes-on") == "suspended"
    types = [t for t, _ in await daemon_events(daemon_proc, "goes-on")]
    assert types.count("session_suspend") == 1 and "session_close" not in types


async def test_a_session_back_after_its_run_end_suspend_is_a_misprediction(
    daemon_proc, engine, start_proxy
) -> None:
    """The Agents-SDK chat pattern: the user writes again after the grace. The session is
    restored (its chunks were kept), the misprediction counted, the grace lengthened."""
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=2)
    final = await run_to_final_answer(proxy, "chat-agent")
    clock.advance(2)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "chat-agent") == "suspended"
    clock.advance(7)  # the user reads and writes again, 9 s after the answer
    await chat(proxy, final, "chat-agent")
    assert await proxy.sender.flush(120)
    st = proxy.lifecycle.stats
    assert (st.run_end_mispredictions, st.restores) == (1, 1)
    assert state(daemon_proc, "chat-agent") == "active"
    assert ("snapshot_restore", "next_request") in await daemon_events(daemon_proc, "chat-agent")
    assert proxy.lifecycle.grace.seconds == 9.0
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{proxy.url}/_ramakv/metrics") as r:
            text = await r.text()
    assert "ramakv_proxy_run_end_mispredictions_total 1.0" in text
    assert "ramakv_proxy_run_end_grace_seconds 9.0" in text


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": ASK["messages"]},  # plain chat: no tools offered
        {**ASK, "tool_choice": "none"},  # tools offered, never used: an answer in a chat
    ],
    ids=["no-tools", "tools-unused"],
)
async def test_chat_without_tool_use_is_not_suspended(
    daemon_proc, engine, start_proxy, body: dict[str, Any]
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=5)
    answer = await chat(proxy, body, "chat")
    assert not answer["choices"][0]["message"].get("tool_calls")
    assert proxy.lifecycle.state_of("chat") == "idle"
    clock.advance(600)  # far past the grace, short of the idle close
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "chat") == "active"
    assert proxy.lifecycle.stats.suspends_run_end == 0


async def test_run_end_grace_zero_never_suspends(daemon_proc, engine, start_proxy) -> None:
    clock = ManualClock()
    proxy = await start_proxy(
        engine.url, daemon_proc.url, clock=clock, run_end_grace_s=0, session_idle_close_s=0
    )
    await run_to_final_answer(proxy, "kept")
    clock.advance(3600)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "kept") == "active"
    assert proxy.lifecycle.stats.suspends_run_end == 0 and proxy.lifecycle.sessions == 0
    assert clock.pending == 0
