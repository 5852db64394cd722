"""Hypothesis state machine: the manager against a model that recomputes refcounts."""

from __future__ import annotations

import copy

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import RamAKvError
from ramakv_daemon.core.manager import SessionManager, recompute_parked, recompute_refcounts

SIDS = st.sampled_from(["s1", "s2", "s3", "s4"])
HASHES = st.lists(st.sampled_from([f"h{i}" for i in range(10)]), max_size=8)


class ManagerMachine(RuleBasedStateMachine):
    """Random event sequences; after every step refcounts equal the recomputed model."""

    def __init__(self) -> None:
        super().__init__()
        self.m = SessionManager()

    def _apply(self, op, *args, **kw) -> Change | None:
        before_counts = self.m.refcounts.as_dict()
        before_sessions = dict(self.m.sessions)
        try:
            change = op(*args, **kw)
        except RamAKvError:
            # An illegal step changes nothing.
            assert self.m.refcounts.as_dict() == before_counts
            assert self.m.sessions == before_sessions
            return None
        after = self.m.refcounts.as_dict()
        evicted = change.evict_delete + change.evict_demote
        # Every chunk evicted is referenced by nobody.
        for h in evicted:
            assert after.get(h, 0) == 0, f"evicted referenced chunk {h}"
        # Every chunk that dropped to zero in this step was evicted exactly once.
        dropped = {h for h, n in before_counts.items() if n > 0 and after.get(h, 0) == 0}
        for h in dropped:
            assert evicted.count(h) == 1, f"{h} dropped to 0 but evicted {evicted.count(h)}x"
        assert len(evicted) == len(set(evicted))
        return change

    @rule(sid=SIDS, hashes=st.one_of(st.none(), HASHES))
    def turn_end(self, sid: str, hashes: list[str] | None) -> None:
        old = self.m.sessions.get(sid)
        self._apply(self.m.turn_end, sid, hashes)
        if hashes is None and old is not None:
            assert self.m.sessions[sid].chunk_hashes == old.chunk_hashes

    @rule(sid=SIDS)
    def turn_start(self, sid: str) -> None:
        change = self._apply(self.m.turn_start, sid)
        assert change is not None
        s = self.m.sessions.get(sid)
        if s is None or s.suspended:
            assert change.prefetch == []

    @rule(sid=SIDS, source=st.one_of(st.none(), SIDS))
    def snapshot_restore(self, sid: str, source: str | None) -> None:
        src = self.m.sessions.get(source or sid)
        change = self._apply(self.m.snapshot_restore, sid, source)
        if src is not None:
            assert change is not None
            assert change.prefetch == list(dict.fromkeys(src.chunk_hashes))
            assert not self.m.sessions[sid].suspended

    @rule(sid=SIDS)
    def suspend(self, sid: str) -> None:
        change = self._apply(self.m.session_suspend, sid)
        assert change is not None and change.evict_delete == []

    @rule(sid=SIDS)
    def close(self, sid: str) -> None:
        self._apply(self.m.session_close, sid)
        assert sid not in self.m.sessions

    @rule(sid=SIDS)
    def fork(self, sid: str) -> None:
        self._apply(self.m.session_fork, sid)

    @rule(sid=SIDS)
    def fork_end(self, sid: str) -> None:
        s = self.m.sessions.get(sid)
        change = self._apply(self.m.session_fork_end, sid)
        if s is not None and s.fork_holds:
            assert change is not None
            assert self.m.sessions[sid].fork_holds == s.fork_holds[:-1]

    @rule(hashes=HASHES, force=st.booleans(), dry_run=st.booleans())
    def chunk_evict(self, hashes: list[str], force: bool, dry_run: bool) -> None:
        before = copy.copy(self.m.sessions), self.m.refcounts.as_dict()
        change = self._apply(self.m.chunk_evict, hashes, force=force, dry_run=dry_run)
        assert change is not None
        if dry_run:
            assert (self.m.sessions, self.m.refcounts.as_dict()) == before
        if force and not dry_run:
            for h in hashes:
                assert self.m.refcounts.get(h) == 0

    @rule(sid=SIDS, hashes=HASHES, op=st.sampled_from(["turn_end", "close", "fork", "suspend"]))
    def undo_restores_everything(self, sid: str, hashes: list[str], op: str) -> None:
        before = (dict(self.m.sessions), self.m.refcounts.as_dict(), dict(self.m.parked))
        calls = {
            "turn_end": lambda: self.m.turn_end(sid, hashes),
            "close": lambda: self.m.session_close(sid),
            "fork": lambda: self.m.session_fork(sid),
            "suspend": lambda: self.m.session_suspend(sid),
        }
        try:
            change = calls[op]()
        except RamAKvError:
            return
        self.m.undo(change)
        assert (dict(self.m.sessions), self.m.refcounts.as_dict(), dict(self.m.parked)) == before

    @rule()
    def restart(self) -> None:
        counts = self.m.refcounts.as_dict()
        fresh = SessionManager()
        fresh.load(self.m.sessions.values())
        assert fresh.refcounts.as_dict() == counts
        self.m = fresh

    @rule(sids=st.lists(SIDS, min_size=1, max_size=3), maps=st.lists(HASHES, min_size=3,
                                                                      max_size=3))
    def committed_view(self, sids: list[str], maps: list[list[str]]) -> None:
        """Changes in doubt taken out for a read: the state before them inside the block,
        exactly the state after them outside it (sessions, refcounts, total, parked)."""
        m = self.m

        def state() -> tuple:
            return (dict(m.sessions), m.refcounts.as_dict(), m.refcounts.total_references(),
                    dict(m.parked))

        before = state()
        pending = [m.turn_end(sid, hashes) for sid, hashes in zip(sids, maps, strict=False)]
        pending.append(m.session_close(sids[0]))
        after = state()
        with m.as_committed(pending):
            assert state() == before
        assert state() == after

    @invariant()
    def total_references_is_the_sum(self) -> None:
        assert self.m.refcounts.total_references() == sum(self.m.refcounts.as_dict().values())

    @invariant()
    def refcounts_match_model(self) -> None:
        assert self.m.refcounts.as_dict() == recompute_refcounts(self.m.sessions.values())

    @invariant()
    def parked_counts_match_model(self) -> None:
        assert self.m.parked == recompute_parked(self.m.sessions.values())


ManagerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestManagerMachine = ManagerMachine.TestCase
