"""Forks by id: out-of-order ends, retries, holds that outlive the parent, expiry, limits."""

from __future__ import annotations

import pytest

from ramakv_daemon.core.errors import CapacityExceeded, IllegalTransition, SessionNotFound
from ramakv_daemon.core.fork import ForkIds
from ramakv_daemon.core.manager import SessionManager, recompute_refcounts


@pytest.fixture
def m() -> SessionManager:
    return SessionManager()


def fork(m: SessionManager, sid: str, now: float = 0.0) -> int:
    fid = m.session_fork(sid, now).data["fork_id"]
    assert isinstance(fid, int)
    return fid


def exact(m: SessionManager) -> None:
    assert m.refcounts.as_dict() == recompute_refcounts(m.sessions.values(), m.forks.values())


def test_fork_ids_are_increasing_and_shared_by_namespaces() -> None:
    ids = ForkIds()
    a = SessionManager(fork_ids=ids)
    b = SessionManager(fork_ids=ids, namespace="other")
    a.turn_end("p", ["x"])
    b.turn_end("p", ["x"])
    got = [fork(a, "p"), fork(b, "p"), fork(a, "p")]
    assert got == [1, 2, 3]


def test_parallel_subagents_end_in_any_order(m: SessionManager) -> None:
    """The fault fork-by-id fixes: the first subagent to finish must not release the
    second one's snapshot when the parent's map changed between the forks."""
    m.turn_end("p", ["a"])
    first = fork(m, "p")
    m.turn_end("p", ["b"])  # a still held by the first fork
    second = fork(m, "p")
    m.turn_end("p", ["c"])  # b still held by the second fork
    change = m.session_fork_end("p", first)
    assert change.data == {"fork_end": True, "fork_id": first}
    assert change.evict_cold == ["a"]
    assert m.refcounts.get("b") == 1  # the second subagent's chunk is still held
    assert m.session_fork_end("p", second).evict_cold == ["b"]
    exact(m)


def test_a_released_or_unknown_fork_id_answers_false_and_changes_nothing(
    m: SessionManager,
) -> None:
    m.turn_end("p", ["a"])
    fid = fork(m, "p")
    m.session_fork_end("p", fid)
    before = (dict(m.sessions), m.refcounts.as_dict(), dict(m.forks.by_id))
    for retry in (fid, 999):
        change = m.session_fork_end("p", retry)
        assert change.data == {"fork_end": False, "fork_id": retry}
        assert not change.durable and not change.evict_delete and not change.prev_counts
    assert (dict(m.sessions), m.refcounts.as_dict(), dict(m.forks.by_id)) == before


def test_another_sessions_fork_id_is_not_ours_to_end(m: SessionManager) -> None:
    m.turn_end("p", ["a"])
    m.turn_end("q", ["a"])
    fid = fork(m, "p")
    assert m.session_fork_end("q", fid).data["fork_end"] is False
    assert m.refcounts.get("a") == 3


def test_without_an_id_the_newest_fork_ends(m: SessionManager) -> None:
    m.turn_end("p", ["a"])
    fork(m, "p")
    m.turn_end("p", ["b"])
    newest = fork(m, "p")
    m.turn_end("p", ["c"])
    change = m.session_fork_end("p")
    assert change.data["fork_id"] == newest and change.evict_cold == ["b"]
    assert m.session_fork_end("p").evict_cold == ["a"]
    with pytest.raises(IllegalTransition, match="has no open fork"):
        m.session_fork_end("p")
    with pytest.raises(SessionNotFound):
        m.session_fork_end("nope")


def test_close_keeps_open_forks_held_until_their_end(m: SessionManager) -> None:
    m.turn_end("p", ["sys", "a"])
    fid = fork(m, "p")
    m.turn_end("p", ["sys", "a", "b"])
    close = m.session_close("p")
    assert close.evict_delete == ["b"]  # only what the fork does not hold
    assert close.notes["open_forks"] == 1
    assert "p" not in m.sessions
    assert m.refcounts.get("sys") == 1 and m.refcounts.get("a") == 1
    assert m.holders_of(["a"]) == {"a": ["p"]}
    exact(m)
    end = m.session_fork_end("p", fid)  # by id, after the parent's close
    assert sorted(end.evict_cold) == ["a", "sys"]
    assert len(m.refcounts) == 0 and len(m.forks) == 0


def test_fork_end_by_a_closed_session_id_ends_its_newest_fork(m: SessionManager) -> None:
    m.turn_end("p", ["a"])
    fork(m, "p")
    m.session_close("p")
    assert m.session_fork_end("p").evict_cold == ["a"]
    with pytest.raises(SessionNotFound):
        m.session_fork_end("p")


def test_expiry_releases_old_holds_only(m: SessionManager) -> None:
    m.turn_end("p", ["a"])
    old = fork(m, "p", now=100.0)
    m.turn_end("p", ["b"])
    young = fork(m, "p", now=150.0)
    m.turn_end("p", ["c"])
    assert m.expire_forks(now=149.0, ttl_s=50.0) is None  # 49 s old: not yet
    assert m.expire_forks(now=1e9, ttl_s=0) is None  # 0 = never
    change = m.expire_forks(now=150.0, ttl_s=50.0)
    assert change is not None and change.durable
    assert change.data == {
        "expired": [{"fork_id": old, "session_id": "p", "age_s": 50.0}],
        "evicted_count": 1,
    }
    assert change.evict_cold == ["a"]
    assert [f.fork_id for f in m.forks.values()] == [young]
    exact(m)


def test_expiry_of_a_closed_parents_forks(m: SessionManager) -> None:
    m.turn_end("p", ["a", "b"])
    fork(m, "p", now=0.0)
    fork(m, "p", now=1.0)
    m.session_close("p")
    change = m.expire_forks(now=10.0, ttl_s=5.0)
    assert change is not None
    assert sorted(change.evict_cold) == ["a", "b"]  # each zero evicted once
    assert [r["fork_id"] for r in change.data["expired"]] == [1, 2]  # type: ignore[index]
    assert len(m.refcounts) == 0 and change.prev_sessions == {}


def test_undo_of_fork_fork_end_and_expiry(m: SessionManager) -> None:
    m.turn_end("p", ["a"])
    fid = fork(m, "p")

    def state() -> tuple[object, ...]:
        return (
            dict(m.sessions),
            m.refcounts.as_dict(),
            dict(m.forks.by_id),
            [f.fork_id for f in m.forks.of("p")],
        )

    before = state()
    for step in (lambda: m.session_fork_end("p", fid), lambda: m.session_close("p")):
        m.undo(step())
        assert state() == before
    expiry = m.expire_forks(now=1e6, ttl_s=1.0)
    assert expiry is not None
    m.undo(expiry)
    assert state() == before
    m.undo(m.session_fork("p"))
    assert state() == before


def test_the_open_fork_limit_is_per_session_and_named() -> None:
    m = SessionManager(max_forks_per_session=2)
    m.turn_end("p", ["a"])
    m.turn_end("q", ["a"])
    fork(m, "p")
    fork(m, "p")
    before = (m.refcounts.as_dict(), dict(m.forks.by_id), m.fork_ids.next_id)
    with pytest.raises(CapacityExceeded, match=r"max_forks_per_session = 2"):
        m.session_fork("p")
    assert (m.refcounts.as_dict(), dict(m.forks.by_id), m.fork_ids.next_id) == before
    fork(m, "q")  # another session has its own allowance
    m.session_fork_end("p")
    fork(m, "p")  # an ended fork frees its place


def test_forced_evict_reaches_a_closed_parents_fork(m: SessionManager) -> None:
    m.turn_end("p", ["a", "b"])
    fid = fork(m, "p")
    m.session_close("p")
    refused = m.chunk_evict(["a"])
    assert refused.data["refused"] == {"a": ["p"]}
    forced = m.chunk_evict(["a"], force=True)
    assert forced.evict_delete == ["a"]
    assert m.forks.get(fid).hashes == ("b",)  # type: ignore[union-attr]
    exact(m)


def test_load_rebuilds_refcounts_with_forks_and_the_counter(m: SessionManager) -> None:
    m.turn_end("p", ["a"])
    fork(m, "p")
    fork(m, "p")
    m.session_close("p")
    fresh = SessionManager()
    fresh.load(m.sessions.values(), m.forks.values())
    assert fresh.refcounts.as_dict() == {"a": 2}
    fresh.turn_end("p", ["a"])
    assert fork(fresh, "p") == 3  # never an id a loaded fork has


def test_a_shared_store_s_fork_id_is_used_and_the_counter_moves_above_it(
    m: SessionManager,
) -> None:
    m.turn_end("p", ["a"])
    assert m.session_fork("p", 0.0, fork_id=40).data["fork_id"] == 40
    assert m.fork_ids.next_id == 41
    exact(m)


def test_a_handed_fork_id_already_open_is_refused_with_nothing_changed(
    m: SessionManager,
) -> None:
    m.turn_end("p", ["a"])
    m.session_fork("p", 0.0, fork_id=5)
    before = (m.refcounts.as_dict(), [f.fork_id for f in m.forks.values()])
    with pytest.raises(IllegalTransition, match="fork id 5 is already open"):
        m.session_fork("p", 1.0, fork_id=5)
    assert (m.refcounts.as_dict(), [f.fork_id for f in m.forks.values()]) == before
