"""Deletes only on evidence (issue 31): a shared prefix survives every close for the
retention window, an inferred close never deletes, a declared close deletes private dead
chunks, the retention sweep deletes dead chunks after the window, and a restart keeps the
rule. The clock is the ``now`` each call is given."""

from __future__ import annotations

from ramakv_daemon.core.manager import SessionManager

WINDOW = 3600.0
T0 = 1_000_000.0


def manager() -> SessionManager:
    return SessionManager(retain_unreferenced_s=WINDOW)


def test_a_shared_prefix_survives_every_close_for_the_window() -> None:
    m = manager()
    m.turn_end("a", ["sys", "a1"], T0)
    m.turn_end("b", ["sys", "b1"], T0)
    first = m.session_close("a", T0 + 1)
    assert first.evict_delete == ["a1"] and first.evict_cold == []  # sys is still b's
    last = m.session_close("b", T0 + 2)
    # Declared, but two sessions shared sys within the window: ordered cold, kept.
    assert last.evict_delete == ["b1"] and last.evict_cold == ["sys"]
    assert m.sweep_dead(T0 + 2 + WINDOW - 1, 100) is None
    swept = m.sweep_dead(T0 + 2 + WINDOW, 100)
    assert swept is not None and swept.evict_delete == ["sys"]
    assert m.sweep_dead(T0 + 3 * WINDOW, 100) is None  # deleted once


def test_a_prefix_let_go_and_taken_up_by_another_session_counts_as_shared() -> None:
    m = manager()
    m.turn_end("a", ["sys"], T0)
    assert m.session_close("a", T0 + 1, inferred=True).evict_cold == ["sys"]
    m.turn_end("b", ["sys"], T0 + 60)  # within the window: the same prefix again
    close = m.session_close("b", T0 + 61)
    assert close.evict_delete == [] and close.evict_cold == ["sys"]


def test_a_session_that_takes_its_own_chunk_back_does_not_share_it() -> None:
    m = manager()
    m.turn_end("a", ["x", "y"], T0)
    m.turn_end("a", ["y"], T0 + 1)  # declared drop of x: private, deleted
    assert m.last_refs.released == {}
    m.turn_end("a", ["x", "y"], T0 + 2)
    assert m.session_close("a", T0 + 3).evict_delete == ["x", "y"]


def test_an_inferred_close_never_deletes() -> None:
    m = manager()
    m.turn_end("a", ["p1", "p2"], T0)
    change = m.session_close("a", T0 + 5, inferred=True)
    assert change.evict_delete == [] and sorted(change.evict_cold) == ["p1", "p2"]
    assert change.evicted_count == 2 and change.data["closed"] is True
    # Suspended first: the inferred close of a suspended session deletes nothing either.
    m.turn_end("s", ["q1"], T0)
    assert m.session_suspend("s", T0 + 1, inferred=True).evict_cold == ["q1"]
    closed = m.session_close("s", T0 + 2, inferred=True)
    assert closed.evict_delete == [] and closed.evict_cold == ["q1"]


def test_a_declared_close_deletes_private_dead_chunks() -> None:
    m = manager()
    m.turn_end("a", ["p1", "p2"], T0)
    change = m.session_close("a", T0 + 5)
    assert sorted(change.evict_delete) == ["p1", "p2"] and change.evict_cold == []
    assert len(m.last_refs) == 0  # nothing left for the sweep: deleted already


def test_a_chunk_a_suspended_session_names_is_not_deleted_by_a_declared_close() -> None:
    m = manager()
    m.turn_end("sus", ["x"], T0)
    m.session_suspend("sus", T0 + 1)
    m.turn_end("live", ["x", "y"], T0 + 2)
    change = m.session_close("live", T0 + 3)
    assert change.evict_delete == ["y"] and change.evict_cold == ["x"]
    assert m.sweep_dead(T0 + 10 * WINDOW, 100) is None  # still named by the suspended map


def test_a_turn_end_drop_is_declared_a_suspend_and_a_fork_end_are_not() -> None:
    m = manager()
    m.turn_end("a", ["x", "y", "z"], T0)
    assert m.turn_end("a", ["x", "y"], T0 + 1).evict_delete == ["z"]
    m.session_fork("a", T0 + 2)
    m.turn_end("a", ["x"], T0 + 3)  # y still held by the fork
    ended = m.session_fork_end("a", None, T0 + 4)
    assert ended.evict_delete == [] and ended.evict_cold == ["y"]
    # A pause (declared) demotes; a guessed one (a run end) orders cold in every tier.
    paused = m.session_suspend("a", T0 + 5)
    assert (paused.evict_demote, paused.evict_cold, paused.evict_delete) == (["x"], [], [])
    m.snapshot_restore("a", None, T0 + 6)
    guessed = m.session_suspend("a", T0 + 7, inferred=True)
    assert (guessed.evict_demote, guessed.evict_cold, guessed.evict_delete) == ([], ["x"], [])


def test_the_sweep_deletes_in_slices_oldest_first_after_the_window() -> None:
    m = manager()
    for i in range(5):
        m.turn_end(f"s{i}", [f"c{i}"], T0)
        m.session_close(f"s{i}", T0 + i, inferred=True)
    assert m.sweep_dead(T0 + WINDOW - 1, 10) is None
    first = m.sweep_dead(T0 + WINDOW + 2, 2)
    assert first is not None and first.evict_delete == ["c0", "c1"]
    second = m.sweep_dead(T0 + WINDOW + 2, 2)
    assert second is not None and second.evict_delete == ["c2"]  # c3, c4: not yet
    rest = m.sweep_dead(T0 + WINDOW + 4, 10)
    assert rest is not None and rest.evict_delete == ["c3", "c4"]


def test_a_chunk_named_again_is_not_swept() -> None:
    m = manager()
    m.turn_end("a", ["x"], T0)
    m.session_close("a", T0, inferred=True)
    m.turn_end("b", ["x"], T0 + 1)
    assert m.sweep_dead(T0 + 2 * WINDOW, 10) is None


def test_a_window_of_zero_deletes_dead_chunks_at_once() -> None:
    m = SessionManager(retain_unreferenced_s=0.0)
    m.turn_end("a", ["sys", "a1"], T0)
    m.turn_end("b", ["sys", "b1"], T0)
    m.session_close("a", T0)
    assert sorted(m.session_close("b", T0).evict_delete) == ["b1", "sys"]  # as before
    m.turn_end("c", ["c1"], T0)
    assert m.session_close("c", T0, inferred=True).evict_cold == ["c1"]
    swept = m.sweep_dead(T0, 10)
    assert swept is not None and swept.evict_delete == ["c1"]


def test_a_restart_counts_what_sessions_share_as_referenced_at_the_load() -> None:
    m = manager()
    m.turn_end("a", ["sys", "a1"], T0)
    m.turn_end("b", ["sys", "b1"], T0)
    load = T0 + 10 * WINDOW  # long after the sessions were written
    fresh = manager()
    fresh.load(m.sessions.values(), m.forks.values(), load)
    fresh.session_close("a", load + 1)
    last = fresh.session_close("b", load + 2)
    assert last.evict_delete == ["b1"] and last.evict_cold == ["sys"]
    assert fresh.sweep_dead(load + 2 + WINDOW - 1, 10) is None
    swept = fresh.sweep_dead(load + 2 + WINDOW, 10)
    assert swept is not None and swept.evict_delete == ["sys"]
