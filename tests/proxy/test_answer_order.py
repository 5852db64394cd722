"""The end of an answer reaches the client only after the daemon acknowledged its turn_end."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from support.openai_engine import chunk_hashes, prompt_of

CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are a careful agent with a long shared prompt."},
        {"role": "user", "content": "List the files in the repository, then summarise them."},
    ],
}
# How long the instrumented daemon client holds a turn_end back, hoping the client gets
# the whole answer first (it only can when the proxy does not wait for the turn_end).
HOLD_S = 0.3


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_answer_ends_after_turn_end_is_acknowledged(
    daemon_proc, engine, start_proxy, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    """A hook closing the session once the client has the answer must find the turn
    already recorded: the turn_end's answer comes before the answer's end, even when the
    daemon is slow to give it."""
    # A bound far above HOLD_S, so a loaded box cannot make the proxy give up waiting.
    proxy = await start_proxy(
        engine.url, daemon_proc.url, daemon_timeout=30.0, daemon_wait_ms=30_000
    )
    order: list[str] = []
    answered = asyncio.Event()
    real_raw = proxy.sender.client.raw

    async def slow_raw(event: Any) -> Any:  # noqa: ANN401
        if event.get("type") == "turn_end":
            # Waits for a condition that must not come (the client having the answer);
            # today's proxy lets it come at once, so this order check fails without sleeps.
            try:
                await asyncio.wait_for(answered.wait(), HOLD_S)
            except TimeoutError:
                pass
        env = await real_raw(event)
        order.append(f"{event.get('type')} acknowledged")
        return env

    monkeypatch.setattr(proxy.sender.client, "raw", slow_raw)
    sid = f"ordered-{'sse' if stream else 'json'}"
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/chat/completions",
            json={**CHAT, "stream": stream},
            headers={"X-Session-Id": sid},
        ) as r:
            assert r.status == 200
            raw = await r.read()
        order.append("answer ended")
        answered.set()
    if stream:
        assert raw.rstrip().endswith(b"data: [DONE]")
    # No flush: the daemon already holds the turn when the client has the answer.
    answer = daemon_proc.event("session_map", session_id=sid)
    assert answer["ok"] and answer["data"]["chunk_hashes"] == chunk_hashes(prompt_of(CHAT))
    listed = daemon_proc.event("list_sessions")["data"]["sessions"]
    assert sid in {s["session_id"] for s in listed}
    # list_sessions: a session the proxy does not know yet may be one the daemon suspended
    # (tests/proxy/test_daemon_suspended.py); the proxy asks before its turn_start.
    assert order == [
        "list_sessions acknowledged",
        "turn_start acknowledged",
        "turn_end acknowledged",
        "answer ended",
    ]
