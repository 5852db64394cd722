"""Reading an engine's answer: kv_transfer_params from JSON bodies and SSE streams."""

from __future__ import annotations

import json
import zlib
from typing import Any

MARKER = b"kv_transfer_params"


def from_json_body(body: bytes, content_encoding: str = "") -> dict[str, Any] | None:
    """``kv_transfer_params`` of a non-streamed completion, or None when it has none."""
    enc = content_encoding.lower()
    try:
        if enc in ("gzip", "x-gzip"):
            body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            body = zlib.decompress(body)
        elif enc not in ("", "identity"):
            return None
    except zlib.error:
        return None
    if MARKER not in body:
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    return _params_of(obj)


def _params_of(obj: Any) -> dict[str, Any] | None:
    if isinstance(obj, dict):
        params = obj.get("kv_transfer_params")
        if isinstance(params, dict):
            return params
    return None


class SseScanner:
    """Fed the raw bytes of an SSE stream; remembers the last ``kv_transfer_params`` seen.

    Only complete lines are looked at, and only lines that mention kv_transfer_params are
    parsed, so scanning costs a byte search per network chunk.
    """

    def __init__(self) -> None:
        self.params: dict[str, Any] | None = None
        self.done = False  # saw "data: [DONE]"
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk if self._tail else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._tail = data
            return
        complete, self._tail = data[: cut + 1], data[cut + 1 :]
        if MARKER in complete:
            for line in complete.split(b"\n"):
                if MARKER in line:
                    self._line(line)
        if b"[DONE]" in complete:
            self.done = True

    def close(self) -> None:
        """End of stream: look at a last line that had no newline."""
        if self._tail and MARKER in self._tail:
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
            self.params = params


def session_id_of(header_value: str | None, body: bytes) -> str | None:
    """The session id: the header if set, else the request body's ``user`` string."""
    if header_value:
        return header_value
    if b'"user"' not in body:
        return None
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    user = obj.get("user") if isinstance(obj, dict) else None
    return user if isinstance(user, str) and user else None
