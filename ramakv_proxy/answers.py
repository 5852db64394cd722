"""What an engine's answer says: its kv_transfer_params, and whether it calls a tool.

A tool call is a choice whose ``finish_reason`` is ``"tool_calls"`` (vLLM's ``auto`` and
``required`` tool choice) or whose message / delta carries a non-empty ``tool_calls`` list
(vLLM answers a *named* ``tool_choice`` with ``finish_reason: "stop"``, as OpenAI does).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

KV_MARKER = b"kv_transfer_params"
TOOL_MARKER = b"tool_calls"


@dataclass(slots=True)
class Answer:
    """The parts of an answer the proxy acts on."""

    params: dict[str, Any] | None = None
    tool_call: bool = False


def _choice_calls_tool(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    if choice.get("finish_reason") == "tool_calls":
        return True
    for part in ("message", "delta"):
        msg = choice.get(part)
        if isinstance(msg, dict) and isinstance(msg.get("tool_calls"), list) and msg["tool_calls"]:
            return True
    return False


def calls_tool(obj: Any) -> bool:
    """True when a completion (or a streamed chunk of one) calls a tool."""
    if not isinstance(obj, dict):
        return False
    choices = obj.get("choices")
    return isinstance(choices, list) and any(_choice_calls_tool(c) for c in choices)


def _params_of(obj: Any) -> dict[str, Any] | None:
    if isinstance(obj, dict):
        params = obj.get("kv_transfer_params")
        if isinstance(params, dict):
            return params
    return None


def _decoded(body: bytes, content_encoding: str) -> bytes | None:
    enc = content_encoding.lower()
    try:
        if enc in ("gzip", "x-gzip"):
            return zlib.decompress(body, 16 + zlib.MAX_WBITS)
        if enc == "deflate":
            return zlib.decompress(body)
    except zlib.error:
        return None
    return body if enc in ("", "identity") else None


def read_json_answer(body: bytes, content_encoding: str = "") -> Answer:
    """A non-streamed answer's kv_transfer_params and tool call (parsed only if it has one)."""
    raw = _decoded(body, content_encoding)
    if raw is None or (KV_MARKER not in raw and TOOL_MARKER not in raw):
        return Answer()
    try:
        obj = json.loads(raw)
    except ValueError:
        return Answer()
    return Answer(_params_of(obj), calls_tool(obj))


class StreamScanner:
    """Fed the raw bytes of an SSE stream; keeps the last ``kv_transfer_params`` seen and
    whether any chunk called a tool.

    Only complete lines are looked at, and only lines that mention one of the two markers
    are parsed, so scanning costs two byte searches per network chunk.
    """

    def __init__(self) -> None:
        self.answer = Answer()
        self.done = False  # saw "data: [DONE]"
        self._tail = b""

    @property
    def params(self) -> dict[str, Any] | None:
        return self.answer.params

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk if self._tail else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._tail = data
            return
        complete, self._tail = data[: cut + 1], data[cut + 1 :]
        if KV_MARKER in complete or TOOL_MARKER in complete:
            for line in complete.split(b"\n"):
                if KV_MARKER in line or TOOL_MARKER in line:
                    self._line(line)
        if b"[DONE]" in complete:
            self.done = True

    def close(self) -> None:
        """End of stream: look at a last line that had no newline."""
        if self._tail and (KV_MARKER in self._tail or TOOL_MARKER in self._tail):
            self._line(self._tail)
        self._tail = b""

    def _line(self, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"data:"):
            return
        try:
            obj = json.loads(line[5:])
        except ValueError:
            return
        params = _params_of(obj)
        if params is not None:
            self.answer.params = params
        if not self.answer.tool_call and calls_tool(obj):
            self.answer.tool_call = True
