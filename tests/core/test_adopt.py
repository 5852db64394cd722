"""SessionManager.adopt: a session taken over from another node joins this node's state."""

from __future__ import annotations

import pytest

from ramakv_daemon.core.errors import IllegalTransition
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import SessionManager, recompute_parked, recompute_refcounts
from ramakv_daemon.core.session import Session


def test_an_adopted_session_references_its_map_and_turn_start_prefetches_it() -> None:
    m = SessionManager()
    m.turn_end("mine", ["sys", "m1"])
    change = m.adopt(Session("moved", ("sys", "x", "x", "y"), turn_count=7, last_event_ts=5.0))
    assert change.data == {"adopted": True, "chunk_count": 3}
    assert not change.durable and not change.evict_delete  # the row is already ours
    assert dict(m.refcounts.counts) == recompute_refcounts(m.sessions.values())
    assert m.refcounts.counts["sys"] == 2
    assert m.turn_start("moved").prefetch == ["sys", "x", "y"]
    assert m.sessions["moved"].turn_count == 7


def test_a_suspended_session_is_parked_not_referenced() -> None:
    m = SessionManager()
    m.adopt(Session("s", ("a", "b"), suspended=True))
    assert dict(m.refcounts.counts) == {}
    assert m.parked == recompute_parked(m.sessions.values()) == {"a": 1, "b": 1}


def test_adopting_a_session_already_here_raises_and_changes_nothing() -> None:
    m = SessionManager()
    m.turn_end("s", ["a"])
    before = (dict(m.sessions), dict(m.refcounts.counts), dict(m.parked))
    with pytest.raises(IllegalTransition):
        m.adopt(Session("s", ("b",)))
    assert (dict(m.sessions), dict(m.refcounts.counts), dict(m.parked)) == before


def test_undo_of_an_adoption_forgets_it() -> None:
    m = SessionManager()
    m.turn_end("other", ["a"])
    change = m.adopt(Session("s", ("a", "b")))
    m.undo(change)
    assert set(m.sessions) == {"other"}
    assert dict(m.refcounts.counts) == {"a": 1}


def test_open_forks_move_with_an_adopted_session_and_end_here() -> None:
    m = SessionManager()
    m.turn_end("mine", ["sys"])
    moved = [Fork(41, "s", ("sys", "a"), 3.0), Fork(42, "s", ("a", "old"), 4.0)]
    m.adopt(Session("s", ("sys", "a", "b")), moved)
    assert [f.fork_id for f in m.forks.of("s")] == [41, 42]
    assert dict(m.refcounts.counts) == recompute_refcounts(m.sessions.values(), moved)
    assert m.fork_ids.take() == 43  # ids stay above every fork held here
    # The subagent's fork_end reaches the new owner (affinity by session id) and ends it.
    ended = m.session_fork_end("s", 42)
    assert ended.data["fork_end"] and ended.evict_cold == ["old"]
    assert dict(m.refcounts.counts) == recompute_refcounts(m.sessions.values(), moved[:1])


def test_adopting_a_fork_id_already_open_here_raises_and_changes_nothing() -> None:
    m = SessionManager()
    m.turn_end("t", ["a"])
    m.session_fork("t", fork_id=7)
    before = (dict(m.sessions), dict(m.refcounts.counts), m.forks.values())
    with pytest.raises(IllegalTransition):
        m.adopt(Session("s", ("b",)), [Fork(7, "s", ("b",), 1.0)])
    assert (dict(m.sessions), dict(m.refcounts.counts), m.forks.values()) == before
