"""Exception hierarchy of the pure core; each message is the client-facing error text."""

from __future__ import annotations


class RamAKvError(Exception):
    """Base of every error the core raises; ``str(err)`` is what clients see."""


class InvalidEvent(RamAKvError):
    """The event is malformed: a missing field, a wrong type, a limit exceeded."""


class UnknownEventType(InvalidEvent):
    """No handler is registered for the event's ``type``."""

    def __init__(self) -> None:
        super().__init__("unknown event type")


class MissingField(InvalidEvent):
    """A required field is absent."""

    def __init__(self, field: str) -> None:
        super().__init__(f"missing required field '{field}'")
        self.field = field


class SessionNotFound(RamAKvError):
    """The event names a session the daemon does not know."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session '{session_id}' not found")
        self.session_id = session_id


class CapacityExceeded(RamAKvError):
    """A configured cap (e.g. max_sessions) would be exceeded."""


class IllegalTransition(RamAKvError):
    """The session exists but cannot take this step now (e.g. fork_end with no open fork)."""
