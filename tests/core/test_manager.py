"""Unit tests of the pure session manager's semantics."""

from __future__ import annotations

import pytest

from ramakv_daemon.core.errors import IllegalTransition, SessionNotFound
from ramakv_daemon.core.manager import SessionManager


@pytest.fixture
def m() -> SessionManager:
    return SessionManager()


def test_turn_end_diffs_and_evicts_only_zeros(m: SessionManager) -> None:
    m.turn_end("a", ["sys", "x", "y"])
    m.turn_end("b", ["sys", "z"])
    change = m.turn_end("a", ["sys", "y", "w"])
    assert change.evict_delete == ["x"]
    assert m.refcounts.get("sys") == 2
    assert change.data == {"evicted_count": 1, "map_updated": True, "debug_written": False}


def test_duplicates_in_one_map_hold_one_reference(m: SessionManager) -> None:
    m.turn_end("a", ["x", "x", "x"])
    assert m.refcounts.get("x") == 1
    assert m.session_map("a").data["chunk_hashes"] == ["x", "x", "x"]
    assert m.session_close("a").evict_delete == ["x"]


def test_turn_end_with_an_empty_list_empties_the_map(m: SessionManager) -> None:
    m.turn_end("a", ["x", "y"])
    change = m.turn_end("a", [])
    assert change.data["map_updated"] is True
    assert sorted(change.evict_delete) == ["x", "y"]
    assert m.sessions["a"].chunk_hashes == ()
    assert m.sessions["a"].turn_count == 2


def test_shared_chunk_survives_one_close(m: SessionManager) -> None:
    m.turn_end("a", ["sys", "a1"])
    m.turn_end("b", ["sys", "b1"])
    assert sorted(m.session_close("a").evict_delete) == ["a1"]
    assert m.refcounts.get("sys") == 1
    assert sorted(m.session_close("b").evict_delete) == ["b1", "sys"]


def test_fork_end_releases_the_snapshot_not_the_current_map(m: SessionManager) -> None:
    m.turn_end("p", ["a", "b"])
    m.session_fork("p")
    m.turn_end("p", ["a", "c"])  # b is still held by the fork
    assert m.refcounts.get("b") == 1
    change = m.session_fork_end("p")
    assert change.evict_cold == ["b"]
    assert m.refcounts.get("a") == 1 and m.refcounts.get("c") == 1


def test_forks_nest_newest_first(m: SessionManager) -> None:
    m.turn_end("p", ["a"])
    m.session_fork("p")
    m.turn_end("p", ["b"])
    m.session_fork("p")
    m.turn_end("p", ["c"])
    assert m.session_fork_end("p").evict_cold == ["b"]
    assert m.session_fork_end("p").evict_cold == ["a"]
    with pytest.raises(IllegalTransition, match="has no open fork"):
        m.session_fork_end("p")


def test_fork_end_of_another_session_never_touches_ours(m: SessionManager) -> None:
    m.turn_end("p", ["a"])
    m.turn_end("q", ["a"])
    m.session_fork("p")
    with pytest.raises(IllegalTransition):
        m.session_fork_end("q")
    assert m.refcounts.get("a") == 3


def test_suspend_demotes_and_restore_prefetches_in_order(m: SessionManager) -> None:
    m.turn_end("a", ["z", "y", "z", "x"])
    m.turn_end("b", ["y"])
    change = m.session_suspend("a")
    # A declared pause: out of DDR, the disk copies where the tier's LRU has them.
    assert sorted(change.evict_demote) == ["x", "z"] and change.evict_delete == []
    assert change.evict_cold == []
    assert change.data == {"evicted_count": 2, "suspended": True}
    assert m.session_map("a").data["chunk_hashes"] == ["z", "y", "z", "x"]
    restore = m.snapshot_restore("a")
    assert restore.prefetch == ["z", "y", "x"]
    assert restore.data == {"prefetch_sent": True, "prefetch_count": 3}
    assert m.refcounts.get("y") == 2


def test_close_of_suspended_session_deletes_its_demoted_chunks(m: SessionManager) -> None:
    m.turn_end("a", ["x", "s"])
    m.turn_end("b", ["s"])
    m.session_suspend("a")
    change = m.session_close("a")
    assert change.evict_delete == ["x"]
    assert m.refcounts.get("s") == 1


def test_turn_end_on_suspended_session_reactivates_it(m: SessionManager) -> None:
    m.turn_end("a", ["x"])
    m.session_suspend("a")
    m.turn_end("a", ["x", "y"])
    assert not m.sessions["a"].suspended
    assert m.refcounts.get("x") == 1 and m.refcounts.get("y") == 1


def test_restore_from_source_leaves_source_unchanged(m: SessionManager) -> None:
    m.turn_end("old", ["a", "b"])
    m.session_suspend("old")
    m.snapshot_restore("new", "old")
    assert m.sessions["new"].chunk_hashes == ("a", "b")
    assert m.sessions["old"].suspended
    with pytest.raises(SessionNotFound, match="session 'ghost' not found"):
        m.snapshot_restore("new", "ghost")


def test_unknown_sessions(m: SessionManager) -> None:
    assert m.turn_start("nope").data == {"prefetch_sent": False, "prefetch_count": 0}
    assert m.session_close("nope").data == {"evicted_count": 0, "closed": False}
    assert m.session_suspend("nope").data == {"evicted_count": 0, "suspended": False}
    for op in (m.session_map, m.session_fork, m.session_fork_end, m.snapshot_restore):
        with pytest.raises(SessionNotFound, match="session 'nope' not found"):
            op("nope")


def test_chunk_evict_refuses_referenced_unless_forced(m: SessionManager) -> None:
    m.turn_end("a", ["x", "y"])
    dry = m.chunk_evict(["x", "free"], dry_run=True)
    assert dry.data["refused"] == {"x": ["a"]} and dry.data["evicted"] == ["free"]
    assert dry.evict_delete == []
    forced = m.chunk_evict(["x"], force=True)
    assert forced.evict_delete == ["x"]
    assert forced.data["released"] == {"a": ["x"]}
    assert m.sessions["a"].chunk_hashes == ("y",)


def test_undo_restores_state(m: SessionManager) -> None:
    m.turn_end("a", ["x"])
    before = (dict(m.sessions), m.refcounts.as_dict())
    change = m.session_close("a")
    m.undo(change)
    assert (dict(m.sessions), m.refcounts.as_dict()) == before


def test_zero_chunk_still_in_a_suspended_map_is_ordered_cold_not_deleted(m: SessionManager) -> None:
    m.turn_end("a", ["x"])
    m.turn_end("b", ["x"])
    m.session_suspend("a")  # x still held by b
    change = m.turn_end("b", ["y"])  # x drops to 0, but a will want it back
    assert change.evict_cold == ["x"] and change.evict_delete == []
    assert m.session_close("a").evict_delete == ["x"]


def test_a_chunk_kept_across_turns_stays_one_string_object() -> None:
    # Each turn_end's hashes are fresh strings from the JSON decoder; the stored map must
    # reuse the previous map's objects, or every kept chunk costs one more string per turn.
    m = SessionManager()
    first = ["".join(["sys", "-0"]), "".join(["c", "1"])]
    m.turn_end("s", first)
    second = ["".join(["sys", "-0"]), "".join(["c", "1"]), "c2"]
    assert second[0] is not first[0]
    m.turn_end("s", second)
    stored = m.sessions["s"].chunk_hashes
    assert stored == ("sys-0", "c1", "c2")
    assert stored[0] is first[0] and stored[1] is first[1]
    m.turn_end("s", ["".join(["c", "2"])])  # dropping the rest keeps the kept one's object
    assert m.sessions["s"].chunk_hashes[0] is stored[2]
