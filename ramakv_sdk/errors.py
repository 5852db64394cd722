"""Errors the SDK raises: the daemon's own error text, or "could not reach it"."""

from __future__ import annotations


class RamAKvError(Exception):
    """The daemon answered ``ok: false`` (or something that is not an envelope).

    ``message`` is the daemon's error text verbatim, ``type`` the event type it answered
    for (None when unknown) and ``status`` the HTTP status (None when there was no answer).
    """

    def __init__(self, message: str, type: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.type = type
        self.status = status

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, type={self.type!r})"


class DaemonUnavailable(RamAKvError):
    """The daemon could not be reached: connection refused, reset or timed out."""


class TraceUnauthorized(RamAKvError):
    """The daemon refused the trace handshake: HTTP 401/403 (missing or wrong token)."""


class TraceProtocolMismatch(RamAKvError):
    """The daemon speaks another trace protocol version (close code 4010)."""
