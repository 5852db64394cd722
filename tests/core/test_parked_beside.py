"""After a start-up from packed maps the parked table is an array table over the refcount
table's keys (and the suspended maps'): a sweep that suspends every loaded session counts
into its arrays, not into a dict, and every table still equals the recomputed model."""

from __future__ import annotations

import random

import pytest

from ramakv_daemon.core.count_table import BULK, CountTable
from ramakv_daemon.core.manager import SessionManager, recompute_parked, recompute_refcounts
from ramakv_daemon.core.packed import PackedMap, text_of
from ramakv_daemon.core.session import Session

SHARED = [text_of(c) for c in range(1, 9)]  # a system prompt every map starts with


def _maps(n: int, rnd: random.Random) -> list[tuple[str, ...]]:
    return [(*SHARED, *(text_of(rnd.getrandbits(63)) for _ in range(BULK + 8))) for _ in range(n)]


def _load(maps: list[tuple[str, ...]], suspended: set[int]) -> SessionManager:
    sessions = [
        Session(f"s{i}", PackedMap.of(m) or m, turn_count=1, suspended=i in suspended)
        for i, m in enumerate(maps)
    ]
    manager = SessionManager(retain_unreferenced_s=60.0)
    manager.load(sessions, (), 0.0)
    return manager


def _same_as_model(m: SessionManager) -> None:
    assert m.parked == recompute_parked(m.sessions.values())
    assert m.refcounts.as_dict() == recompute_refcounts(m.sessions.values(), ())


@pytest.mark.parametrize(
    "suspended_at_load",
    [
        set(),  # none: the parked table shares the refcount table's keys
        {0, 1},  # some, with private chunks: over the union of both tables' keys
    ],
)
def test_a_sweep_counts_into_the_arrays(suspended_at_load: set[int]) -> None:
    rnd = random.Random(7)
    maps = _maps(6, rnd)
    m = _load(maps, suspended_at_load)
    assert isinstance(m.parked, CountTable) and isinstance(m.refcounts.counts, CountTable)
    _same_as_model(m)
    for i in range(len(maps)):
        if i not in suspended_at_load:
            m.session_suspend(f"s{i}", 1.0)
            _same_as_model(m)
    parked = m.parked
    assert isinstance(parked, CountTable)
    assert parked.extra == {}  # every suspended chunk counted in the arrays
    # Back from suspension, one by one (a map that moves on), then a new map's hashes.
    for i in range(len(maps)):
        m.turn_end(f"s{i}", maps[i][:-1], 2.0)
        _same_as_model(m)
    m.turn_end("s0", (*maps[0], text_of(rnd.getrandbits(63))), 3.0)
    m.session_suspend("s0", 4.0)
    _same_as_model(m)


def test_suspended_maps_inside_the_active_ones_share_their_keys() -> None:
    maps = _maps(3, random.Random(3))
    maps.append(maps[0][: BULK + 4])  # a suspended map listing only loaded active chunks
    m = _load(maps, {3})
    parked, counts = m.parked, m.refcounts.counts
    assert isinstance(parked, CountTable) and isinstance(counts, CountTable)
    assert parked.arrays[0] is counts.arrays[0]  # one key array for both
    _same_as_model(m)
    m.session_suspend("s1", 1.0)
    _same_as_model(m)


def _pair(maps: list[tuple[str, ...]]) -> tuple[SessionManager, SessionManager]:
    """The same sessions twice: packed (array tables) and as tuples (dicts)."""
    packed = _load(maps, set())
    plain = SessionManager(retain_unreferenced_s=60.0)
    plain.load([Session(f"s{i}", m, turn_count=1) for i, m in enumerate(maps)], (), 0.0)
    assert not isinstance(plain.parked, CountTable)
    return packed, plain


def test_a_resume_unparks_in_bulk_as_the_per_hash_steps_do() -> None:
    """A suspended map taken back (its turn_end) leaves the parked table in one bulk step on
    the arrays: every change, the evidence of what was let go (last_refs) and the tables
    equal those of the same events on dicts, chunk by chunk."""
    rnd = random.Random(11)
    maps = _maps(4, rnd)
    maps[1] = (*maps[1][:-4], *maps[0][-4:])  # s0 and s1 share chunks beyond the prompt
    maps[3] = (*maps[3][:-4], *maps[0][-8:-4])  # s3 (active) holds chunks only s0 parks
    packed, plain = _pair(maps)
    events = [
        ("suspend", "s0", None),
        ("suspend", "s1", None),
        ("suspend", "s2", None),
        ("turn_end", "s0", maps[0][:-6]),  # back, with a shorter map: six chunks let go
        ("turn_end", "s1", (*maps[1], text_of(rnd.getrandbits(63)))),
        ("suspend", "s1", None),
        ("turn_end", "s2", maps[3]),  # back with another session's map
        ("turn_end", "s1", maps[1][: BULK // 2]),
    ]
    for t, (kind, sid, new) in enumerate(events, start=1):
        changes = [
            m.session_suspend(sid, float(t)) if new is None else m.turn_end(sid, new, float(t))
            for m in (packed, plain)
        ]
        a, b = changes
        assert (a.prev_parked, a.prev_counts) == (b.prev_parked, b.prev_counts), (kind, sid)
        assert (a.evict_cold, a.evict_demote, a.evict_delete) == (
            b.evict_cold,
            b.evict_demote,
            b.evict_delete,
        )
        assert packed.last_refs.released == plain.last_refs.released
        assert packed.last_refs.shared_at == plain.last_refs.shared_at
        assert dict(packed.parked.items()) == dict(plain.parked.items())
        assert packed.refcounts.as_dict() == plain.refcounts.as_dict()
        _same_as_model(packed)


@pytest.mark.parametrize("packed", [True, False], ids=["arrays", "dicts"])
def test_what_a_closed_suspended_map_leaves_is_held_or_released(packed: bool) -> None:
    """A suspended map leaving the parked table (its session closed): a chunk another map
    holds or names was held by two until now (shared_at), whatever else parks it; a chunk
    only it named was released now, by it."""
    maps = _maps(3, random.Random(5))
    held_by_s2 = maps[0][-4:]
    parked_by_s1 = maps[0][-8:-4]
    maps[1] = (*maps[1][:-4], *parked_by_s1)
    maps[2] = (*maps[2][:-4], *held_by_s2)
    m = _pair(maps)[0 if packed else 1]
    m.session_suspend("s0", 1.0)
    m.session_suspend("s1", 1.0)
    m.session_close("s0", 5.0, inferred=True)
    refs = m.last_refs
    for h in (*held_by_s2, *parked_by_s1, *SHARED):
        assert refs.shared_at.get(h) == 5.0, h
        assert h not in refs.released, h
    only_s0 = [h for h in maps[0] if h not in (*held_by_s2, *parked_by_s1, *SHARED)]
    assert only_s0 and all(refs.released[h] == (5.0, "s0") for h in only_s0)
    _same_as_model(m)
