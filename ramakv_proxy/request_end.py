"""RequestEnd: how one forwarded request of a session ended, the proxy lifecycle's signal.

Not the daemon's ``Outcome`` (what one event did to its state): hence its own name."""

from __future__ import annotations

import enum


class RequestEnd(enum.Enum):
    """How one request of a session ended, as the proxy saw it: the lifecycle's signal."""

    ANSWERED = "answered"  # a complete 200 answer that calls no tool
    TOOL_CALL = "tool_call"  # a complete 200 answer that calls a tool
    DISCONNECTED = "disconnected"  # the client left before the answer's end
    FAILED = "failed"  # the engine answered an error, or could not be reached
