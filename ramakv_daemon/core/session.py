"""A session's state: its ordered chunk map, turn count and suspension."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from ramakv_daemon.core.packed import PackedMap

#: A chunk map: the tuple of hashes, or the same held packed (core.packed) when every hash
#: is canonical; both read, compare and hash alike.
ChunkMap = tuple[str, ...] | PackedMap


@dataclass(frozen=True, slots=True)
class Session:
    """Immutable session state; the manager swaps whole values so undo is a pointer swap.

    Attributes:
        session_id: the host's id for the conversation.
        chunk_hashes: the ordered chunk map as the engine last reported it (may repeat);
            packed when loaded from a store or kept by turn_end (core.packed).
        turn_count: turn_end events seen.
        suspended: True after session_suspend until snapshot_restore or turn_end; a
            suspended session's map holds no references.
        last_event_ts: wall-clock time of the last event that touched the session.
        namespace: the compatibility namespace the session belongs to ("" = the unnamed
            default); its chunk hashes mean something only within it.
    """

    session_id: str
    chunk_hashes: ChunkMap = ()
    turn_count: int = 0
    suspended: bool = False
    last_event_ts: float = 0.0
    namespace: str = ""

    @property
    def state(self) -> Literal["active", "suspended"]:
        """``"suspended"`` or ``"active"``."""
        return "suspended" if self.suspended else "active"

    def unique_hashes(self) -> tuple[str, ...]:
        """The map's hashes, first occurrence kept, order preserved."""
        return unique(self.chunk_hashes)

    def codes_of(self, unique_hashes: tuple[str, ...]) -> bytes | None:
        """The int64 codes of ``unique_hashes`` (this map's :meth:`unique_hashes`), in
        order, when the map is packed and repeats nothing (then they are its codes)."""
        m = self.chunk_hashes
        return m.codes if isinstance(m, PackedMap) and len(m) == len(unique_hashes) else None

    def held_hashes(self) -> set[str]:
        """Every hash this session holds a reference on through its map (one per hash)."""
        return set() if self.suspended else set(self.chunk_hashes)

    def evolve(self, **changes: Any) -> Session:
        """A copy with ``changes`` applied (field name -> new value)."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, object]:
        """The JSON shape used by the trace stream and admin events (the manager adds the
        session's open forks: they live apart from the session, see core.fork)."""
        out: dict[str, object] = {
            "session_id": self.session_id,
            "state": self.state,
            "turn_count": self.turn_count,
            "chunk_hashes": list(self.chunk_hashes),
            "last_event_ts": self.last_event_ts,
        }
        if self.namespace:  # the default namespace's shape is unchanged
            out["namespace"] = self.namespace
        return out


def unique(hashes: ChunkMap | list[str]) -> tuple[str, ...]:
    """Deduplicate keeping first occurrences in order."""
    return tuple(dict.fromkeys(hashes))


def share_prefix(hashes: tuple[str, ...], anchors: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """``hashes``, its common prefix with the last map seen that began with the same hash
    made of that map's string objects (equal strings: the same map).

    For a bulk load: maps built from a common system prompt then hold one string per
    prompt chunk instead of one per session (at 50,000 sessions x 64 shared chunks, 3.2 M
    strings of 80 bytes less), and counting them hits the same table entry. ``anchors``
    (first hash -> newest such map) is the caller's, kept across calls; the prefix is found
    by bisection with C-level tuple comparisons (a few us a map).
    """
    if not hashes:
        return hashes
    first = hashes[0]
    prev = anchors.get(first)
    if prev is None:
        anchors[first] = hashes
        return hashes
    lo, hi = 1, min(len(prev), len(hashes))  # prev[:lo] == hashes[:lo] always holds
    if prev[:hi] == hashes[:hi]:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if prev[:mid] == hashes[:mid]:
            lo = mid
        else:
            hi = mid
    out = prev[:lo] + hashes[lo:]
    anchors[first] = out
    return out
