"""The optional ``request_id`` of turn_start, snapshot_restore and turn_end: which request
of the session a prefetch is for, so a turn_end cancels only its own request's."""

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.errors import InvalidEvent

MAX_REQUEST_ID_CHARS = 128


def request_id_of(payload: JsonObject) -> str | None:
    """The validated ``request_id`` field, or None when absent or null."""
    return request_id_value(payload.get("request_id"))


def request_id_value(value: object) -> str | None:
    """``value`` as a ``request_id`` (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_REQUEST_ID_CHARS:
        raise InvalidEvent(
            f"'request_id' must be a string of 1 to {MAX_REQUEST_ID_CHARS} characters"
        )
    return value
