"""Which session a request belongs to, named as vLLM and its multi-turn benchmark name it,
and whether it is a step of an agent run (it offers tools and carries their use)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: Where a session id is looked for, in this order; the first non-empty string wins.
SOURCES = (
    "header",  # the session header (X-Session-ID by default; vLLM's own header)
    "session_id",  # the request body's session_id (vLLM)
    "vllm_xargs.session_id",  # vLLM's extra-args object
    "conversation_id",  # vLLM's benchmarks/multi_turn with --send-conversation-id
    "user",  # OpenAI's end-user field
)
# Any of these in the raw body means it is worth parsing (most requests carry none).
_MARKERS = (b'"session_id"', b'"conversation_id"', b'"user"')
_TOOLS = b'"tools"'


@dataclass(frozen=True, slots=True)
class Named:
    """A request's session, where its name came from, and whether it is an agent step."""

    session_id: str
    source: str
    #: It offers ``tools`` (a non-empty list) and its messages show tools in use (a tool
    #: result, or an assistant message that called one): an answer to it that calls no
    #: tool is the agent run's final answer.
    agent_step: bool = False


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _uses_tools(messages: Any) -> bool:
    if not isinstance(messages, list):
        return False
    for m in messages:
        if not isinstance(m, dict):
            continue
        if m.get("role") in ("tool", "function"):
            return True
        if m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list):
            if m["tool_calls"]:
                return True
    return False


def _agent_step(obj: dict[str, Any]) -> bool:
    tools = obj.get("tools")
    return isinstance(tools, list) and bool(tools) and _uses_tools(obj.get("messages"))


def named_request(header_value: str | None, body: bytes) -> Named | None:
    """The session a request names (None when it names none) and whether it is an agent
    step. The body is parsed only when it mentions a naming field or ``tools``, and then
    once, so unnamed plain requests cost a few byte searches."""
    tools = _TOOLS in body
    if header_value and not tools:
        return Named(header_value, "header")
    if not tools and not any(m in body for m in _MARKERS):
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return Named(header_value, "header") if header_value else None
    step = _agent_step(obj)
    if header_value:
        return Named(header_value, "header", step)
    xargs = obj.get("vllm_xargs")
    candidates = (
        ("session_id", obj.get("session_id")),
        ("vllm_xargs.session_id", xargs.get("session_id") if isinstance(xargs, dict) else None),
        ("conversation_id", obj.get("conversation_id")),
        ("user", obj.get("user")),
    )
    for source, value in candidates:
        sid = _text(value)
        if sid is not None:
            return Named(sid, source, step)
    return None


def session_of(header_value: str | None, body: bytes) -> tuple[str, str] | None:
    """``(session_id, source)`` of a request, or None when it names no session.

    ``source`` is one of :data:`SOURCES`.
    """
    named = named_request(header_value, body)
    return (named.session_id, named.source) if named else None
