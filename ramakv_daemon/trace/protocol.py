"""The daemon's side of trace protocol 2: encoding, session summaries, the size bounds.

The contract itself (version, close codes, bounds, record types) is ramakv_protocol's;
its names are imported here so that the daemon's modules keep one import.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import repeat
from typing import cast

import orjson

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.packed import PackedMap
from ramakv_daemon.core.refcount import SharedChunks
from ramakv_daemon.core.session import Session
from ramakv_daemon.trace.shared_counts import counted_above
from ramakv_protocol.records import ForkSummary, SessionSummary
from ramakv_protocol.wire import (
    MAX_DATA_BYTES,
    MAX_HISTORY,
    MAX_MESSAGE_BYTES,
    PART_BYTES,
    PROTOCOL,
    PROTOCOL_CLOSE_CODE,
    PROTOCOL_REASON,
    SHUTDOWN_CLOSE_CODE,
    SHUTDOWN_REASON,
    SLOW_CLOSE_CODE,
)

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_HISTORY",
    "MAX_MESSAGE_BYTES",
    "PART_BYTES",
    "PROTOCOL",
    "PROTOCOL_CLOSE_CODE",
    "PROTOCOL_REASON",
    "SHUTDOWN_CLOSE_CODE",
    "SHUTDOWN_REASON",
    "SLOW_CLOSE_CODE",
    "bounded",
    "encode",
    "is_resync",
    "moved_between",
    "shared_count",
    "shares_moved",
    "summary",
]


def encode(record: Mapping[str, object]) -> str:
    """One record as JSON text.

    orjson first; what it refuses (lone surrogates, integers over 64 bits) gets the
    standard encoder, so the output never depends on which one ran.
    """
    try:
        return orjson.dumps(record).decode()
    except TypeError:
        return json.dumps(record)


def shared_count(
    s: Session,
    counts: Mapping[str, int],
    forks: Sequence[Fork] = (),
    shared: set[str] | None = None,
) -> int:
    """Distinct chunks of the map that some other session also holds, now.

    A chunk is shared when its global refcount is above the references this session
    holds on it itself: one for an active map, one per own open fork that lists it.
    ``shared``: the table's chunks counted twice or more (RefcountTable.shared); for an
    active session without open forks the answer is the map's overlap with it, which
    walks the map against that small set (12 us for 512 chunks at 50,000 x 512, against
    0.9 ms looking each up in the table of millions).
    """
    if not forks and not s.suspended and shared is not None:
        m = s.chunk_hashes
        if isinstance(m, PackedMap) and isinstance(shared, SharedChunks):
            return len(shared.codes.intersection(m.ints()))  # no decode of the map
        return len(shared.intersection(m))
    m = s.chunk_hashes
    if not forks and isinstance(m, PackedMap) and isinstance(counts, CountTable):
        # A suspended map after a restart: its codes searched in the count arrays at once.
        return counted_above(m, counts, 0 if s.suspended else 1)
    unique = set(m)
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


def summary(
    s: Session,
    counts: Mapping[str, int],
    forks: Sequence[Fork] = (),
    shared: set[str] | None = None,
    known: int | None = None,
) -> SessionSummary:
    """A session as protocol 2 sends it: counts and its open forks' summaries, never the
    map itself; its shared_count as of now (``shared``: see :func:`shared_count`;
    ``known``: counted already, in bulk with others by trace.shared_counts)."""
    out: SessionSummary = {
        "session_id": s.session_id,
        "state": s.state,
        "turn_count": s.turn_count,
        "chunk_count": len(s.chunk_hashes),
        "shared_count": shared_count(s, counts, forks, shared) if known is None else known,
        "fork_holds": len(forks),
        "forks": [fork_summary(f) for f in forks],
        "last_event_ts": s.last_event_ts,
    }
    if s.namespace:
        out["namespace"] = s.namespace
    return out


def shares_moved(
    before: Mapping[str, int], counts: Mapping[str, int], parked: Mapping[str, int], forks: int
) -> bool:
    """True when refcounts going from ``before`` (hash -> previous count) to ``counts``
    may have changed the shared_count of a session that did not take part.

    A session holding ``own`` references on a chunk sees it shared while its count is
    above ``own``; a count moving between ``lo`` and ``hi`` changes that for the holders
    with ``lo <= own < hi``: own 1 (an active map) when it crosses 1 <-> 2; own 0 (a
    suspended map listing it, counted in ``parked``) when it leaves or reaches 0; own 2
    or more only for a session with open forks (``forks``: open in the namespace).
    """
    return moved_between(before, list(map(counts.get, before, repeat(0))), parked, forks)


def moved_between(
    before: Mapping[str, int], now: Collection[int], parked: Mapping[str, int], forks: int
) -> bool:
    """:func:`shares_moved` with the counts now given, in ``before``'s order (the trace
    delta has looked them up already).

    Every turn_end asks, over a hundred chunks or more, so the common answer is found in
    C first: when no chunk here is listed by a suspended map and no count is above 1 on
    either side, nothing crossed 1 <-> 2 and no fork holder (count 3 or more) is involved.
    """
    if parked and _lists_any(parked, before):
        return _moved_per_chunk(before, now, parked, forks)
    if max(before.values(), default=0) <= 1 and max(now, default=0) <= 1:
        return False
    return _moved_per_chunk(before, now, {}, forks)


def _lists_any(parked: Mapping[str, int], hashes: Iterable[str]) -> bool:
    """True when a suspended map lists one of ``hashes``. A dict answers in C; a loaded
    CountTable (a restart with suspended packed maps) has no keys view: one lookup each."""
    if isinstance(parked, dict):
        return not parked.keys().isdisjoint(hashes)
    return any(map(parked.__contains__, hashes))


def _moved_per_chunk(
    before: Mapping[str, int], now: Collection[int], parked: Mapping[str, int], forks: int
) -> bool:
    """The rule of :func:`shares_moved`, one chunk at a time."""
    for (h, old), new in zip(before.items(), now, strict=True):
        if old == new:
            continue
        lo, hi = (old, new) if old < new else (new, old)
        if lo <= 1 < hi or (lo == 0 and h in parked) or (forks and hi >= 3 and lo <= forks + 1):
            return True
    return False


def fork_summary(f: Fork) -> ForkSummary:
    """An open fork as the trace names it (Fork.summary, typed as the protocol's)."""
    return cast(ForkSummary, f.summary())  # core stays free of the protocol's types


def bounded(record: JsonObject) -> str:
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
    slim: JsonObject = {"resync": True}
    slim.update(record)
    slim["delta"] = {"sessions": {}, "refcounts": {}}
    slim["omitted"] = {
        "sessions": len(delta.get("sessions") or ()),
        "refcounts": len(delta.get("refcounts") or ()),
    }
    for key in ("prefetch", "evict", "demote", "cold"):
        if key in slim:
            slim["omitted"][key] = len(slim[key])
            slim[key] = []
    slim.pop("notes", None)
    return encode(slim)


def is_resync(text: str) -> bool:
    """True for a record that :func:`bounded` had to cut down."""
    return text.startswith('{"resync":true')
