"""The optional ``reason`` a lifecycle event carries (who decided it and why, e.g. the
proxy's ``tool_pause``; the trace record shows it as ``notes.reason``) and its optional
``inferred`` flag (the host guessed: nothing is deleted on it)."""

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.errors import InvalidEvent

MAX_REASON_CHARS = 64
INFERRED = "inferred"


def reason_of(payload: JsonObject) -> str | None:
    """The validated ``reason`` field, or None when absent or null."""
    return reason_value(payload.get("reason"))


def reason_value(value: object) -> str | None:
    """``value`` as a ``reason`` (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_REASON_CHARS:
        raise InvalidEvent(f"'reason' must be a string of 1 to {MAX_REASON_CHARS} characters")
    if not value.isprintable():
        raise InvalidEvent("'reason' must be printable text")
    return value


def inferred_of(payload: JsonObject) -> bool:
    """The validated ``inferred`` field (absent or null: False, a declared event)."""
    return inferred_value(payload.get(INFERRED))


def inferred_value(value: object) -> bool:
    """``value`` as the ``inferred`` flag (None: False)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidEvent(f"'{INFERRED}' must be a boolean (true: the host guessed)")
    return value
