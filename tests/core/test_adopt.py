"""SessionManager.adopt: a session taken over from another node joins this node's state."""

from __future__ import annotations

import pytest

from ramakv_daemon.core.errors import IllegalTransition
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
