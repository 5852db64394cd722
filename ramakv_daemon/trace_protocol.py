"""Trace protocol 2: session summaries, per-message size bounds and the close codes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session

PROTOCOL = 2
# No trace message is larger than this, whatever the store holds (docs/trace.md).
MAX_MESSAGE_BYTES = 1 << 20
# An event's reply ``data`` is copied into its record only up to this size: admin reads
# (list_sessions, chunk_top, ...) answer pages that the trace has no use for.
MAX_DATA_BYTES = 16 << 10
# Snapshot pages are cut at about this size.
PART_BYTES = 256 << 10
MAX_HISTORY = 1000

SLOW_CLOSE_CODE = 4008  # "you fell behind": reconnect with ?since=
PROTOCOL_CLOSE_CODE = 4010  # the client asked for (or assumed) another protocol version


def encode(record: Mapping[str, Any]) -> str:
    """One record as JSON text.

    orjson first; what it refuses (lone surrogates, integers over 64 bits) gets the
    standard encoder, so the output never depends on which one ran.
    """
    try:
        return orjson.dumps(record).decode()
    except TypeError:
        return json.dumps(record)


def shared_count(s: Session, counts: Mapping[str, int], forks: Sequence[Fork] = ()) -> int:
    """Distinct chunks of the map that some other session also holds.

    A chunk is shared when its global refcount is above the references this session
    holds on it itself: one for an active map, one per own open fork that lists it.
    Costs one refcount lookup per chunk of the map (memory-bound: about 100 µs for 512
    chunks in a table of millions), so snapshots read :class:`SharedCounts` instead.
    """
    unique = set(s.chunk_hashes)
    if not unique:
        return 0
    get = counts.get
    if not forks:
        own = 0 if s.suspended else 1
        # C-speed counting: the chunks whose count is exactly ``own`` are not shared.
        return len(unique) - list(map(get, unique, [0] * len(unique))).count(own)
    mine = dict.fromkeys(unique, 0 if s.suspended else 1)
    for fork in forks:
        for h in fork.hashes:
            if h in mine:
                mine[h] += 1
    return sum(1 for h, n in mine.items() if get(h, 0) > n)


UNKNOWN = -1  # pass as ``shared`` to send null: not computed yet (see shared_counts)


def summary(
    s: Session, counts: Mapping[str, int], forks: Sequence[Fork] = (), shared: int | None = None
) -> dict[str, Any]:
    """A session as protocol 2 sends it: counts and its open forks' summaries, never the
    map itself. ``shared``: a known shared_count, UNKNOWN for null, None to compute it."""
    if shared is None:
        shared = shared_count(s, counts, forks)
    out: dict[str, Any] = {
        "session_id": s.session_id,
        "state": s.state,
        "turn_count": s.turn_count,
        "chunk_count": len(s.chunk_hashes),
        "shared_count": None if shared == UNKNOWN else shared,
        "fork_holds": len(forks),
        "forks": [f.summary() for f in forks],
        "last_event_ts": s.last_event_ts,
    }
    if s.namespace:
        out["namespace"] = s.namespace
    return out


def bounded(record: dict[str, Any]) -> str:
    """``record`` encoded within the protocol's bounds.

    A large reply ``data`` is left out (``data_omitted_bytes`` says how big it was); a
    record still over MAX_MESSAGE_BYTES (a forced eviction touching every session) keeps
    only its counts and says ``resync``: the daemon sends the subscriber a fresh snapshot
    right after it. ``resync`` is the first key so that senders can spot it cheaply.
    """
    text = encode(record)
    if len(text) <= MAX_DATA_BYTES or "data" not in record:
        return text
    data_text = encode({"data": record["data"]})
    if len(data_text) > MAX_DATA_BYTES:
        record["data"] = None
        record["data_omitted_bytes"] = len(data_text) - 9
        text = encode(record)
    if len(text) <= MAX_MESSAGE_BYTES:
        return text
    delta = record.get("delta") or {}
    slim: dict[str, Any] = {"resync": True}
    slim.update(record)
    slim["delta"] = {"sessions": {}, "refcounts": {}}
    slim["omitted"] = {
        "sessions": len(delta.get("sessions") or ()),
        "refcounts": len(delta.get("refcounts") or ()),
    }
    for key in ("prefetch", "evict", "demote"):
        if key in slim:
            slim["omitted"][key] = len(slim[key])
            slim[key] = []
    slim.pop("notes", None)
    return encode(slim)


def is_resync(text: str) -> bool:
    """True for a record that :func:`bounded` had to cut down."""
    return text.startswith('{"resync":true')
