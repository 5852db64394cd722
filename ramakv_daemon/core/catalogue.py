"""The event catalogue's building blocks: specs, limits and payload validation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ramakv_daemon.core.errors import InvalidEvent, MissingField

if TYPE_CHECKING:  # the reply's shape, checked by mypy; the core imports no protocol
    from ramakv_protocol.replies import EventSpecData

# A decoded JSON object (an event's payload, a reply, a record on its way to the wire):
# its values are whatever the JSON held, checked where they are read.
JsonObject = dict[str, Any]

MAX_SESSION_ID_BYTES = 1024
# debug_context is written with json.dumps(indent=2), which recurses per level: far below
# Python's recursion limit, and deeper than any real message list.
MAX_DEBUG_DEPTH = 64


@dataclass(frozen=True, slots=True)
class EventSpec:
    """What ``list_events`` says of an event, and what validation checks first."""

    name: str
    description: str
    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()

    def as_dict(self) -> EventSpecData:
        """The shape ``list_events`` returns for this event."""
        return {
            "description": self.description,
            "required": list(self.required),
            "optional": list(self.optional),
        }


@dataclass(frozen=True, slots=True)
class Limits:
    """Input limits; defaults are the original project's."""

    max_hashes_per_event: int = 1000
    max_hash_bytes: int = 100


def check_required(spec: EventSpec, payload: JsonObject) -> None:
    """Raise MissingField for the first required field absent from ``payload``."""
    for name in spec.required:
        if name not in payload:
            raise MissingField(name)


def session_id_of(payload: JsonObject, field: str = "session_id") -> str:
    """The validated session id in ``field``.

    Raises:
        InvalidEvent: not a string, empty, too long or containing NUL.
    """
    return session_id_value(payload.get(field), field)


def session_id_value(value: object, field: str = "session_id") -> str:
    """``value`` as a session id in ``field`` (a typed message's field and a payload's
    share this one rule and its texts).

    Raises:
        InvalidEvent: not a string, empty, too long or containing NUL.
    """
    if not isinstance(value, str):
        raise InvalidEvent(f"{field} must be a string")
    if not value:
        raise InvalidEvent(f"{field} must not be empty")
    if "\x00" in value:
        raise InvalidEvent(f"{field} must not contain NUL")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        # A lone surrogate ("\ud800" in the JSON) cannot be stored in SQLite's UTF-8:
        # accepted, it would fail the whole group commit it rides in.
        raise InvalidEvent(f"{field} must be valid Unicode (no lone surrogates)") from None
    if size > MAX_SESSION_ID_BYTES:
        raise InvalidEvent(f"{field} longer than {MAX_SESSION_ID_BYTES} bytes")
    return value


def optional_session_id(payload: JsonObject, field: str) -> str | None:
    """A validated optional session id, or None when absent or null."""
    if payload.get(field) is None:
        return None
    return session_id_of(payload, field)


def chunk_hashes_of(value: object, limits: Limits, field: str = "chunk_hashes") -> list[str]:
    """Validate a chunk hash list (returned as a new list of the same strings).

    Hashes are not interned: most chunks belong to one session, and the interned-string
    table would cost more per chunk (about 40 bytes) than the few shared chunks' copies.

    Raises:
        InvalidEvent: not a list of non-empty strings, too many, or one too long.
    """
    if not isinstance(value, list):
        raise InvalidEvent(f"'{field}' must be a list of strings")
    if check_chunk_hashes(value, limits, field):
        return list(value)
    return _chunk_hashes_slow(value, limits, field)


def check_chunk_hashes(value: Sequence[Any], limits: Limits, field: str) -> bool:
    """Check a sequence of chunk hashes (a typed message's tuple, a payload's list):
    True when all passed the fast path; False when only the slow path, which also
    raises on a bad one, could tell (a non-ASCII hash that is valid).

    Raises:
        InvalidEvent: too many hashes (a bad one is left to the slow path).
    """
    if len(value) > limits.max_hashes_per_event:
        raise InvalidEvent(
            f"'{field}' has {len(value)} hashes, more than the limit of "
            f"{limits.max_hashes_per_event}"
        )
    # Fast path, all in C: plain ASCII strings, none empty, none near the byte limit.
    try:
        joined = "".join(value)  # raises TypeError on any non-string, in C
    except TypeError:
        joined = None
    return bool(
        joined is not None
        and joined.isascii()
        and all(value)
        and max(map(len, value), default=0) <= limits.max_hash_bytes
    )


def chunk_hashes_value(value: Sequence[object], limits: Limits, field: str) -> None:
    """Raise InvalidEvent (the texts of :func:`chunk_hashes_of`) on a bad hash sequence."""
    if not check_chunk_hashes(value, limits, field):
        _chunk_hashes_slow(value, limits, field)


def _chunk_hashes_slow(value: Sequence[object], limits: Limits, field: str) -> list[str]:
    """Check each hash in turn; raises on the first bad one with its index."""
    out: list[str] = []
    for i, h in enumerate(value):
        if not isinstance(h, str) or not h:
            raise InvalidEvent(f"'{field}[{i}]' must be a non-empty string")
        if not h.isascii():
            try:
                h.encode("utf-8")
            except UnicodeEncodeError:
                # As for session ids: SQLite and the backend's JSON cannot carry it.
                raise InvalidEvent(
                    f"'{field}[{i}]' must be valid Unicode (no lone surrogates)"
                ) from None
        # Cheap length test first: only long strings pay for the encode.
        too_long = len(h) > limits.max_hash_bytes // 4 and (
            len(h.encode("utf-8", "surrogatepass")) > limits.max_hash_bytes
        )
        if too_long:
            raise InvalidEvent(f"'{field}[{i}]' is longer than {limits.max_hash_bytes} bytes")
        out.append(h)
    return out


def object_of(payload: JsonObject, field: str) -> JsonObject | None:
    """An optional JSON object field; None when absent or null."""
    value = payload.get(field)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidEvent(f"'{field}' must be an object")
    return value


def bool_of(payload: JsonObject, field: str, default: bool = False) -> bool:
    """An optional boolean field."""
    value = payload.get(field, default)
    return bool_value(value, field, default)


def bool_value(value: object, field: str, default: bool = False) -> bool:
    """``value`` as an optional boolean field (None: ``default``)."""
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidEvent(f"'{field}' must be true or false")
    return value


def check_depth(value: object, limit: int, field: str) -> None:
    """Raise InvalidEvent when ``value`` nests lists/objects more than ``limit`` deep.

    Iterative, so no input can make the check itself recurse; runs before anything is
    applied, so a refused event changes nothing.
    """
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise InvalidEvent(f"'{field}' is nested more than {limit} levels deep")
        if isinstance(node, dict | list):  # only containers are pushed (and the root)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
