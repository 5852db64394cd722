"""Checks a decoded trace message against its record type, field by field (for tests).

TypedDicts check nothing at run time; this walks the types of ramakv_protocol.records so
that a test can assert that what the daemon sends is what the protocol says: every
required field there with the right type, no field the protocol does not name.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from functools import cache
from typing import (
    Final,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from ramakv_protocol.records import (
    BackendRecord,
    BudgetRecord,
    DisconnectedMarker,
    EventRecord,
    EvictWindowRecord,
    ReconnectedMarker,
    SnapshotHeader,
    SnapshotPart,
)
from ramakv_protocol.replies import REPLY_TYPES

RECORD_TYPES: Final[Mapping[str, type]] = {
    "snapshot": SnapshotHeader,
    "snapshot_sessions": SnapshotPart,
    "event": EventRecord,
    "backend": BackendRecord,
    "budget": BudgetRecord,
    "evict_window": EvictWindowRecord,
    "disconnected": DisconnectedMarker,
    "reconnected": ReconnectedMarker,
}


def reply_problems(type_: str, data: object) -> list[str]:
    """What in an event's reply ``data`` differs from its type in REPLY_TYPES ([] also
    for an event without a typed reply)."""
    tp = REPLY_TYPES.get(type_)
    return [] if tp is None else _check(data, tp, "data")


def problems(msg: Mapping[str, object]) -> list[str]:
    """What in ``msg`` differs from its kind's type ("field: why"); [] when it conforms."""
    kind = msg.get("kind")
    tp = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if tp is None:
        return [f"kind: unknown kind {kind!r}"]
    return _check(msg, tp, "")


@cache
def _fields(tp: type) -> tuple[dict[str, object], frozenset[str]]:
    """A TypedDict's field types and its required keys (NotRequired read from the hints:
    with postponed annotations __required_keys__ cannot see it on Python 3.11)."""
    hints = get_type_hints(tp, include_extras=True)
    fields: dict[str, object] = {}
    required = set()
    total = bool(getattr(tp, "__total__", True))
    for name, hint in hints.items():
        origin = get_origin(hint)
        if origin is NotRequired or origin is Required:
            fields[name] = get_args(hint)[0]
            if origin is Required:
                required.add(name)
        else:
            fields[name] = hint
            if total:
                required.add(name)
    return fields, frozenset(required)


def _check(value: object, tp: object, path: str) -> list[str]:
    where = path or "record"
    if tp is object:
        return []
    if isinstance(tp, type) and is_typeddict(tp):
        return _check_typeddict(value, tp, path)
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return [] if value in args else [f"{where}: {value!r} is not one of {list(args)}"]
    if origin is Union or origin is types.UnionType:
        if any(not _check(value, arg, path) for arg in args):
            return []
        return [f"{where}: {_short(value)} is none of {tp}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {_short(value)}"]
        return [p for i, item in enumerate(value) for p in _check(item, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {_short(value)}"]
        out = []
        for key, item in value.items():
            if not isinstance(key, str):
                out.append(f"{where}: key {key!r} is not a string")
            out.extend(_check(item, args[1], f"{path}.{key}"))
        return out
    return [] if _is_scalar(value, tp) else [f"{where}: expected {tp}, got {_short(value)}"]


def _check_typeddict(value: object, tp: type, path: str) -> list[str]:
    where = path or "record"
    if not isinstance(value, dict):
        return [f"{where}: expected an object ({tp.__name__}), got {_short(value)}"]
    fields, required = _fields(tp)
    out = [f"{where}: missing {name!r}" for name in sorted(required - value.keys())]
    for key, item in value.items():
        if key not in fields:
            out.append(f"{where}: {key!r} is not a field of {tp.__name__}")
        else:
            out.extend(_check(item, fields[key], f"{path}.{key}" if path else key))
    return out


def _is_scalar(value: object, tp: object) -> bool:
    if tp is None or tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:  # JSON has one number type: 3 is a float too
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return False


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
