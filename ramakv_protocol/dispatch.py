"""Reading trace messages: parse one, then hand it to the method for its ``kind``.

A follower subclasses :class:`TraceReader` and overrides the ``on_*`` methods it cares
about; :meth:`TraceReader.read` picks one by kind, so no follower repeats the switch on
kind strings. Only the kind is checked: a record's fields are the daemon's (see
ramakv_protocol.conformance for a full check, used by the tests).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import ClassVar, Final, Generic, TypeVar, cast, get_args

from ramakv_protocol.records import (
    BackendRecord,
    BudgetRecord,
    DisconnectedMarker,
    EventRecord,
    EvictWindowRecord,
    Kind,
    MarkerKind,
    ReconnectedMarker,
    RecordKind,
    SnapshotHeader,
    SnapshotPart,
)

T = TypeVar("T")

RECORD_KINDS: Final[frozenset[str]] = frozenset(get_args(RecordKind))
MARKER_KINDS: Final[frozenset[str]] = frozenset(get_args(MarkerKind))


def parse(text: str | bytes, loads: Callable[[str | bytes], object] = json.loads) -> object:
    """A message's JSON value, or None when it is not JSON; ``loads`` may be a faster
    decoder (it must raise ValueError, as json and orjson do, on bad input)."""
    try:
        return loads(text)
    except ValueError:
        return None


def as_message(value: object) -> dict[str, object] | None:
    """``value`` when it is a JSON object, else None (a follower skips it)."""
    return cast(dict[str, object], value) if isinstance(value, dict) else None


def is_kind(msg: Mapping[str, object], kind: Kind) -> bool:
    """Whether ``msg`` is of ``kind`` (a checked name: a typo fails the type check)."""
    return msg.get("kind") == kind


def seq_of(msg: Mapping[str, object]) -> int | None:
    """The record's sequence number, when it has one."""
    seq = msg.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def epoch_of(msg: Mapping[str, object]) -> str | None:
    """The daemon run the record belongs to, when it says."""
    epoch = msg.get("epoch")
    return epoch if isinstance(epoch, str) else None


class KindNotRead(NotImplementedError):
    """A reader was given a record kind it has no method for and did not override
    :meth:`TraceReader.other` to take (a NotImplementedError, as callers catch it)."""


class TraceReader(Generic[T]):
    """Calls the ``on_<kind>`` method for each message; what is not overridden (and any
    kind this protocol does not know, such as a client's own markers) goes to ``other``."""

    # kind -> the class's function for it, looked up once per class (a console applies
    # thousands of records a second: no attribute lookup by name per message).
    _readers: ClassVar[dict[str, Callable[..., object]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._readers = {kind: getattr(cls, name) for kind, name in _METHODS.items()}

    def read(self, msg: Mapping[str, object]) -> T:
        """Dispatch one message by its ``kind``."""
        kind = msg.get("kind")
        fn = self._readers.get(kind) if isinstance(kind, str) else None
        if fn is None:
            return self.other(msg)
        return cast(T, fn(self, msg))

    def other(self, msg: Mapping[str, object]) -> T:
        """Every message without its own method (override; the default refuses)."""
        raise KindNotRead(f"{type(self).__name__} does not read {msg.get('kind')!r}")

    def on_snapshot(self, msg: SnapshotHeader) -> T:
        return self.other(msg)

    def on_snapshot_sessions(self, msg: SnapshotPart) -> T:
        return self.other(msg)

    def on_event(self, msg: EventRecord) -> T:
        return self.other(msg)

    def on_backend(self, msg: BackendRecord) -> T:
        return self.other(msg)

    def on_budget(self, msg: BudgetRecord) -> T:
        return self.other(msg)

    def on_evict_window(self, msg: EvictWindowRecord) -> T:
        return self.other(msg)

    def on_disconnected(self, msg: DisconnectedMarker) -> T:
        return self.other(msg)

    def on_reconnected(self, msg: ReconnectedMarker) -> T:
        return self.other(msg)


# kind -> the name of its method (each class's own functions are read by these names).
_METHODS: Final = {kind: f"on_{kind}" for kind in RECORD_KINDS | MARKER_KINDS}
TraceReader._readers = {kind: getattr(TraceReader, name) for kind, name in _METHODS.items()}
