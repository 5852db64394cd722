"""The start-up bulk rebuild builds exactly the tables the first-principles recompute does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ramakv_daemon.core import rebuild
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import SessionManager, recompute_parked, recompute_refcounts
from ramakv_daemon.core.packed import PackedMap, code_of
from ramakv_daemon.core.session import Session

HASHES = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=8)
# Canonical hashes (packable) and a few that are not ("x", "0a"), so maps come both ways.
MIXED = st.lists(st.sampled_from(["a", "-b", "7f", "0", "x", "0a"]), max_size=8)


def _held(hashes: list[str], packed: bool) -> tuple[str, ...] | PackedMap:
    """The map as a store load holds it: packed when asked and every hash allows it."""
    return (PackedMap.of(hashes) if packed else None) or tuple(hashes)


SESSIONS = st.lists(
    st.builds(
        Session,
        session_id=st.text(min_size=1, max_size=3),
        chunk_hashes=st.builds(_held, st.one_of(HASHES, MIXED), st.booleans()),
        suspended=st.booleans(),
    ),
    max_size=6,
)
FORKS = st.lists(
    st.builds(
        lambda i, sid, hashes: Fork(i, sid, tuple(dict.fromkeys(hashes)), 0.0),
        st.integers(1, 10**6),
        st.text(min_size=1, max_size=3),
        HASHES,
    ),
    max_size=4,
    unique_by=lambda f: f.fork_id,
)


@pytest.mark.parametrize("general_from", [0, rebuild._GENERAL_LAYOUT_FROM])
@settings(deadline=None)  # the first example imports numpy: no wall-clock bound
@given(sessions=SESSIONS, forks=FORKS)
def test_rebuild_matches_recompute(
    sessions: list[Session], forks: list[Fork], general_from: int
) -> None:
    # general_from=0: the hash-storing table the start-up of a large store gets.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rebuild, "_GENERAL_LAYOUT_FROM", general_from)
        built = rebuild.refcounts(sessions, forks)
        want = recompute_refcounts(sessions, forks)
        assert dict(built.table.items()) == want and len(built.table) == len(want)
        assert built.total == sum(want.values())
        assert built.shared == {h for h, n in want.items() if n > 1}
        assert built.shared_codes is None or built.shared_codes == (
            {code_of(h) for h in built.shared} - {None}
        )
        assert all(h in built.table and built.table[h] == n for h, n in want.items())
        assert dict(rebuild.parked(sessions).items()) == recompute_parked(sessions)


@settings(deadline=None)  # the first example imports numpy: no wall-clock bound
@given(sessions=SESSIONS, forks=FORKS)
def test_rebuilt_tables_have_positive_counts(sessions: list[Session], forks: list[Fork]) -> None:
    m = SessionManager()
    m.load(sessions, forks)
    # Without a packed map the tables are plain dicts (adopted without a copy).
    if not any(isinstance(s.chunk_hashes, PackedMap) for s in sessions):
        assert type(m.refcounts.counts) is dict and type(m.parked) is dict
    assert all(n > 0 for n in m.refcounts.counts.values())
    assert all(n > 0 for n in m.parked.values())
    by_id = {s.session_id: s for s in sessions}.values()
    assert m.refcounts.as_dict() == recompute_refcounts(by_id, forks)
    assert dict(m.parked.items()) == recompute_parked(by_id)


def test_table_keeps_working_after_the_rebuild() -> None:
    m = SessionManager()
    m.load([Session("s1", ("a", "b", "a")), Session("s2", ("b", "c"), suspended=True)])
    assert m.refcounts.as_dict() == {"a": 1, "b": 1}
    assert m.parked == {"b": 1, "c": 1}
    m.turn_end("s1", ["c", "d"])
    assert m.refcounts.as_dict() == recompute_refcounts(m.sessions.values())


@given(
    maps=st.lists(
        st.lists(st.sampled_from(["s1", "s2", "s3", "a", "b", "c"]), max_size=6), max_size=8
    )
)
def test_share_prefix_keeps_every_map_equal_and_shares_its_strings(maps: list[list[str]]) -> None:
    """Each map comes back equal (fresh string objects, as a decoder makes them); a prefix
    common with the last map of the same first hash is made of that map's objects."""
    from ramakv_daemon.core.session import share_prefix

    anchors: dict[str, tuple[str, ...]] = {}
    last: dict[str, tuple[str, ...]] = {}
    for m in maps:
        fresh = tuple("".join(list(h)) for h in m)  # new objects, equal values
        out = share_prefix(fresh, anchors)
        assert out == fresh
        if fresh and fresh[0] in last:
            prev = last[fresh[0]]
            k = 0
            while k < min(len(prev), len(fresh)) and prev[k] == fresh[k]:
                k += 1
            assert all(out[i] is prev[i] for i in range(k))
        if fresh:
            last[fresh[0]] = out
