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
