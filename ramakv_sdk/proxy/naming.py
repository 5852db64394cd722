"""Which session a request belongs to, named as vLLM and its multi-turn benchmark name it."""

from __future__ import annotations

import json
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


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def session_of(header_value: str | None, body: bytes) -> tuple[str, str] | None:
    """``(session_id, source)`` of a request, or None when it names no session.

    ``source`` is one of :data:`SOURCES`. The body is parsed only when it mentions one of
    the fields, so unnamed requests cost a few byte searches.
    """
    if header_value:
        return header_value, "header"
    if not any(m in body for m in _MARKERS):
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
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
            return sid, source
    return None
