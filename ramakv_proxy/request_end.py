"""RequestEnd: how one forwarded request of a session ended (the daemon's ``Outcome`` is
another thing: what one event did to its state)."""

from __future__ import annotations

import enum


class RequestEnd(enum.Enum):
    """How one request of a session ended, as the proxy saw it: the lifecycle's signal."""

    ANSWERED = "answered"  # a complete 200 answer that calls no tool
    TOOL_CALL = "tool_call"  # a complete 200 answer that calls a tool
    DISCONNECTED = "disconnected"  # the client left before the answer's end
    FAILED = "failed"  # the engine answered an error, or could not be reached
