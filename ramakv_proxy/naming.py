"""Which session a request belongs to, named as vLLM and its multi-turn benchmark name it
(header and body ids normalised alike), whether it is a step of an agent run (it offers
tools and carries their use), and its prompt's shape (to tell a side call)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from ramakv_protocol.log_text import loggable
from ramakv_proxy.context import PromptShape

log = logging.getLogger("ramakv_proxy")

#: The daemon takes 1024 bytes; the proxy keeps room for its ``#branch`` suffix and the
#: ``--scope-sessions-by-key`` prefix.
MAX_SESSION_ID_BYTES = 960

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


@dataclass(frozen=True, slots=True)
class Named:
    """A request's session, where its name came from, and whether it is an agent step."""

    session_id: str
    source: str
    #: It offers ``tools`` (a non-empty list) and its messages show tools in use (a tool
    #: result, or an assistant message that called one): an answer to it that calls no
    #: tool is the agent run's final answer.
    agent_step: bool = False
    #: The prompt's shape (None when the body was not parsed or has no prompt).
    shape: PromptShape | None = field(default=None, compare=False)


def normalise(value: Any) -> str | None:
    """A session id as the proxy uses it, from the header or the body alike: surrounding
    whitespace stripped; None when absent or empty. Raises ValueError naming the problem
    for an id the daemon would refuse (NUL or other control characters, lone surrogates,
    too long)."""
    if not isinstance(value, str):
        return None
    sid = value.strip()
    if not sid:
        return None
    if any(not c.isprintable() for c in sid):
        raise ValueError(f"session id {loggable(sid)} contains control characters")
    try:
        size = len(sid.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"session id {loggable(sid)} is not valid Unicode") from None
    if size > MAX_SESSION_ID_BYTES:
        raise ValueError(f"session id longer than {MAX_SESSION_ID_BYTES} bytes")
    return sid


def scoped(api_key: str | None, session_id: str) -> str:
    """``session_id`` prefixed with a hash of the caller's API key (``--scope-sessions-by-key``):
    a client can name only its own key's sessions. Hooks that talk to the daemon directly
    must use the same scoped id."""
    digest = hashlib.sha256((api_key or "").encode("utf-8", "surrogatepass")).hexdigest()
    return f"k{digest[:16]}:{session_id}"


def api_key_of(authorization: str | None) -> str | None:
    """The bearer token of an ``Authorization`` header (OpenAI clients send their key so)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else authorization.strip()


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
    """The session a request names (None when it names none, or names one the daemon
    would refuse: logged), whether it is an agent step, and its prompt's shape. The body
    is parsed only when a header names the session or it mentions a naming field, and
    then once, so unnamed plain requests cost a few byte searches."""
    try:
        return _named(header_value, body)
    except ValueError as err:
        log.warning("request not reported: %s", err)
        return None


def _named(header_value: str | None, body: bytes) -> Named | None:
    header = normalise(header_value)
    if header is None and not any(m in body for m in _MARKERS):
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return Named(header, "header") if header else None
    step = _agent_step(obj)
    shape = PromptShape.of(obj)
    if header:
        return Named(header, "header", step, shape)
    xargs = obj.get("vllm_xargs")
    candidates = (
        ("session_id", obj.get("session_id")),
        ("vllm_xargs.session_id", xargs.get("session_id") if isinstance(xargs, dict) else None),
        ("conversation_id", obj.get("conversation_id")),
        ("user", obj.get("user")),
    )
    for source, value in candidates:
        sid = normalise(value)
        if sid is not None:
            return Named(sid, source, step, shape)
    return None


def session_of(header_value: str | None, body: bytes) -> tuple[str, str] | None:
    """``(session_id, source)`` of a request, or None when it names no session.

    ``source`` is one of :data:`SOURCES`.
    """
    named = named_request(header_value, body)
    return (named.session_id, named.source) if named else None
