"""Tool-calling turns through ramakv-proxy, and the polls the lifecycle tests wait with."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from ascend_ext_dev.tiny_engine import TOOL_ARGS
from support.engine_rig import HTTP_TIMEOUT_S, POLL_TIMEOUT_S

T = TypeVar("T")

__all__ = [
    "ASK",
    "NAMED",
    "TOOL",
    "TOOL_ARGS",
    "after_tool",
    "session_state",
    "stream_tool_call",
    "tool_result_messages",
    "tool_result_turn",
    "wait_for",
    "wait_until",
]

# The real engine's tool: one valid value (``{"path": "."}``), so the tiny model's call parses.
TOOL = {
    "type": "function",
    "function": {
        "name": "list_files",
        "description": "List the files under a path",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "enum": ["."]}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
}
NAMED = {"type": "function", "function": {"name": "list_files"}}

# The stand-in engine's agent turn (it always answers a request with tools with a call).
ASK: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "A long shared system prompt for every agent. " * 4},
        {"role": "user", "content": "Run the tests under src, please."},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "run_tests",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        }
    ],
}


def after_tool(ask: dict[str, Any], message: dict[str, Any], result: str) -> dict[str, Any]:
    """The agent's next request: ``ask`` with the answer's tool call and its result appended."""
    call = message["tool_calls"][0]
    return {
        **ask,
        "messages": [
            *ask["messages"],
            message,
            {"role": "tool", "tool_call_id": call["id"], "content": result},
        ],
    }


def session_state(daemon: Any, sid: str) -> str | None:
    """The session's state in the daemon's list, None when it has none (closed)."""
    listed = daemon.event("list_sessions")["data"]["sessions"]
    return next((s["state"] for s in listed if s["session_id"] == sid), None)


def wait_for(check: Callable[[], T], what: str) -> T:
    """Poll ``check()`` until it is truthy (a hang guard, not a time bound)."""
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return got


async def wait_until(check: Callable[[], T], what: str, timeout: float, every: float) -> T:
    """Poll ``check()`` until truthy, yielding to the loop (in-process stand-ins and the
    proxy's timers run on it); ``timeout`` is a hang guard, not a time bound."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(every)
    return got


def stream_tool_call(proxy_url: str, sid: str, messages: list[dict[str, Any]]) -> tuple[str, str]:
    """A streamed turn the tiny model answers with a call (named tool_choice): the raw
    stream and the call's id."""
    body = {"model": "tiny", "messages": messages, "tools": [TOOL], "tool_choice": NAMED}
    with httpx.stream(
        "POST",
        proxy_url + "/v1/chat/completions",
        json={**body, "stream": True, "max_tokens": 24},
        headers={"X-Session-ID": sid},
        timeout=HTTP_TIMEOUT_S,
    ) as r:
        raw = b"".join(r.iter_bytes()).decode()
    chunks = [json.loads(ln[6:]) for ln in raw.split("\n") if ln.startswith("data: {")]
    call_id = next(
        (
            c["choices"][0]["delta"]["tool_calls"][0]["id"]
            for c in chunks
            if c["choices"] and c["choices"][0]["delta"].get("tool_calls")
        ),
        None,
    )
    assert call_id is not None, raw[-2000:]
    return raw, call_id


def tool_result_messages(messages: list[dict[str, Any]], call_id: str) -> list[dict[str, Any]]:
    """``messages``, then the model's ``list_files`` call and the tool's answer."""
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "list_files", "arguments": '{"path":"."}'},
    }
    return [
        *messages,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "README.md setup.py"},
    ]


def tool_result_turn(
    proxy_url: str, sid: str, messages: list[dict[str, Any]], call_id: str
) -> httpx.Response:
    """The agent's next request after the call: its result appended, a short answer."""
    follow = {
        "model": "tiny",
        "max_tokens": 4,
        "messages": tool_result_messages(messages, call_id),
    }
    return httpx.post(
        proxy_url + "/v1/chat/completions",
        json=follow,
        headers={"X-Session-ID": sid},
        timeout=HTTP_TIMEOUT_S,
    )
