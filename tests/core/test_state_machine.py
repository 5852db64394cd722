"""Hypothesis state machine: the manager against a model that recomputes refcounts, with
forks by id (ended in any order, retried, outliving the parent) and expiry on a clock."""

from __future__ import annotations

import copy

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import RamAKvError
from ramakv_daemon.core.fork import ForkIds
from ramakv_daemon.core.manager import SessionManager, recompute_parked, recompute_refcounts
from ramakv_daemon.core.packed import PackedMap, code_of

SIDS = st.sampled_from(["s1", "s2", "s3", "s4"])
# Canonical hashes (a restart holds a map of only these packed, core.packed) and others.
HASHES = st.lists(
    st.sampled_from(["h0", "h1", "h2", "h3", "a", "-b", "7f", "0", "1d", "-8000000000000000"]),
    max_size=8,
)
TTL = 100.0
MAX_FORKS = 3
WINDOW = 60.0  # retain_unreferenced_s


class ManagerMachine(RuleBasedStateMachine):
    """Random event sequences; after every step refcounts equal the recomputed model.

    The fork model: every id handed out (``issued``) and, for the open ones, the parent
    and the snapshot taken at fork time. The clock only moves forward, by rule.
    """

    def __init__(self) -> None:
        super().__init__()
        self.m = SessionManager(max_forks_per_session=MAX_FORKS, retain_unreferenced_s=WINDOW)
        self.now = 0.0
        self.issued: list[int] = []
        self.open: dict[int, tuple[str, tuple[str, ...], float]] = {}

    def _apply(self, op, *args, **kw) -> Change | None:
        before_counts = self.m.refcounts.as_dict()
        before_sessions = dict(self.m.sessions)
        before_forks = dict(self.m.forks.by_id)
        try:
            change = op(*args, **kw)
        except RamAKvError:
            # An illegal step changes nothing.
            assert self.m.refcounts.as_dict() == before_counts
            assert self.m.sessions == before_sessions
            assert self.m.forks.by_id == before_forks
            return None
        if change is None:  # expire_forks: nothing was due
            return None
        after = self.m.refcounts.as_dict()
        # Released to the cache: deleted, demoted or ordered cold (issue 31: a refcount
        # reaching 0 is not by itself a delete).
        evicted = change.evict_delete + change.evict_demote + change.evict_cold
        # A chunk deleted is named by nobody: no live map, fork hold or suspended map.
        for h in change.evict_delete:
            assert h not in self.m.parked, f"deleted chunk {h} still in a suspended map"
        # Every chunk evicted is referenced by nobody.
        for h in evicted:
            assert after.get(h, 0) == 0, f"evicted referenced chunk {h}"
        # Every chunk that dropped to zero in this step was evicted exactly once.
        dropped = {h for h, n in before_counts.items() if n > 0 and after.get(h, 0) == 0}
        for h in dropped:
            assert evicted.count(h) == 1, f"{h} dropped to 0 but evicted {evicted.count(h)}x"
        assert len(evicted) == len(set(evicted))
        return change

    @rule(sid=SIDS, hashes=HASHES)
    def turn_end(self, sid: str, hashes: list[str]) -> None:
        self._apply(self.m.turn_end, sid, hashes, self.now)

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
        # The parent's close leaves its forks held.
        assert {f for f, (p, _, _) in self.open.items() if p == sid} == {
            f.fork_id for f in self.m.forks.of(sid)
        }

    @rule(sid=SIDS)
    def close_inferred(self, sid: str) -> None:
        change = self._apply(self.m.session_close, sid, self.now, inferred=True)
        assert change is not None and change.evict_delete == []  # a guess never deletes

    @rule()
    def retention_sweep(self) -> None:
        change = self._apply(self.m.sweep_dead, self.now, 3)
        if change is not None:
            assert 0 < len(change.evict_delete) <= 3
            assert change.evict_demote == change.evict_cold == []

    @rule(sid=SIDS)
    def fork(self, sid: str) -> None:
        s = self.m.sessions.get(sid)
        n_open = sum(1 for p, _, _ in self.open.values() if p == sid)
        change = self._apply(self.m.session_fork, sid, self.now)
        if s is None or s.suspended or n_open >= MAX_FORKS:
            assert change is None
            return
        assert change is not None
        fid = change.data["fork_id"]
        assert isinstance(fid, int)
        assert all(fid > old for old in self.issued)  # increasing, never reused
        self.issued.append(fid)
        self.open[fid] = (sid, tuple(dict.fromkeys(s.chunk_hashes)), self.now)

    @rule(sid=SIDS)
    def fork_end_newest(self, sid: str) -> None:
        mine = [f for f, (p, _, _) in self.open.items() if p == sid]
        change = self._apply(self.m.session_fork_end, sid, None, self.now)
        if not mine:
            assert change is None
            return
        assert change is not None and change.data["fork_id"] == max(mine)
        del self.open[max(mine)]

    @rule(sid=SIDS, pick=st.integers(0, 20))
    def fork_end_by_id(self, sid: str, pick: int) -> None:
        """Any id ever issued (open, released, another session's) or one never issued."""
        fid = self.issued[pick % len(self.issued)] if self.issued and pick < 18 else 10**6
        mine = fid in self.open and self.open[fid][0] == sid
        before = (self.m.refcounts.as_dict(), dict(self.m.forks.by_id))
        change = self._apply(self.m.session_fork_end, sid, fid, self.now)
        assert change is not None and change.data["fork_end"] is mine
        if mine:
            held = self.open.pop(fid)[1]
            assert set(change.prev_counts) == set(held)  # exactly that fork's snapshot
        else:
            assert not change.durable
            assert (self.m.refcounts.as_dict(), dict(self.m.forks.by_id)) == before

    @rule(seconds=st.sampled_from([1.0, 30.0, 60.0, TTL]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def expire(self) -> None:
        due = {f for f, (_, _, ts) in self.open.items() if self.now - ts >= TTL}
        change = self._apply(self.m.expire_forks, self.now, TTL)
        if not due:
            assert change is None
            return
        assert change is not None
        assert {r["fork_id"] for r in change.data["expired"]} == due  # type: ignore[union-attr]
        for fid in due:
            del self.open[fid]

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
            gone = set(hashes)  # forced out of every holder, open forks included
            self.open = {
                fid: (sid, tuple(h for h in held if h not in gone), ts)
                for fid, (sid, held, ts) in self.open.items()
            }

    @rule(
        sid=SIDS,
        hashes=HASHES,
        op=st.sampled_from(["turn_end", "close", "fork", "suspend", "fork_end", "expire"]),
    )
    def undo_restores_everything(self, sid: str, hashes: list[str], op: str) -> None:
        def state() -> tuple[object, ...]:
            forks = self.m.forks
            return (
                dict(self.m.sessions),
                self.m.refcounts.as_dict(),
                dict(self.m.parked),
                dict(forks.by_id),
                {s: forks.of(s) for s in forks.parents()},
            )

        before = state()
        calls = {
            "turn_end": lambda: self.m.turn_end(sid, hashes),
            "close": lambda: self.m.session_close(sid, self.now),
            "fork": lambda: self.m.session_fork(sid),
            "suspend": lambda: self.m.session_suspend(sid),
            "fork_end": lambda: self.m.session_fork_end(sid),
            "expire": lambda: self.m.expire_forks(self.now + TTL, TTL),
        }
        try:
            change = calls[op]()
        except RamAKvError:
            return
        if change is not None:
            self.m.undo(change)
        assert state() == before
        if op == "fork" and change is not None:
            self.issued.append(change.data["fork_id"])  # type: ignore[arg-type]  # burnt

    @rule()
    def restart(self) -> None:
        """What the store gives back at start-up: sessions, open forks, the counter."""
        counts = self.m.refcounts.as_dict()
        fresh = SessionManager(
            max_forks_per_session=MAX_FORKS,
            fork_ids=ForkIds(self.m.fork_ids.next_id),
            retain_unreferenced_s=WINDOW,
        )
        # As a store load gives them back: maps of canonical hashes packed.
        stored = [
            s.evolve(chunk_hashes=PackedMap.of(s.chunk_hashes) or tuple(s.chunk_hashes))
            for s in self.m.sessions.values()
        ]
        fresh.load(stored, self.m.forks.values(), self.now)
        assert fresh.refcounts.as_dict() == counts
        assert fresh.sessions == self.m.sessions
        self.m = fresh

    @rule(
        sids=st.lists(SIDS, min_size=1, max_size=3), maps=st.lists(HASHES, min_size=3, max_size=3)
    )
    def committed_view(self, sids: list[str], maps: list[list[str]]) -> None:
        """Changes in doubt taken out for a read: the state before them inside the block,
        exactly the state after them outside it (sessions, refcounts, total, parked)."""
        m = self.m

        def state() -> tuple:
            return (
                dict(m.sessions),
                m.refcounts.as_dict(),
                m.refcounts.total_references(),
                dict(m.parked),
            )

        before = state()
        before_forks = {f.fork_id for f in m.forks.values()}
        pending = [m.turn_end(sid, hashes) for sid, hashes in zip(sids, maps, strict=False)]
        pending.append(m.session_close(sids[0]))
        after = state()
        with m.as_committed(pending):
            assert state() == before
        assert state() == after
        # A read of sessions only: sessions and forks as committed, the chunk tables as now.
        with m.as_committed(pending, chunks=False):
            assert state()[0] == before[0] and state()[1:] == after[1:]
            assert {f.fork_id for f in m.forks.values()} == before_forks
        assert state() == after

    @invariant()
    def total_references_is_the_sum(self) -> None:
        assert self.m.refcounts.total_references() == sum(self.m.refcounts.as_dict().values())

    @invariant()
    def refcounts_match_model(self) -> None:
        assert self.m.refcounts.as_dict() == recompute_refcounts(
            self.m.sessions.values(), self.m.forks.values()
        )

    @invariant()
    def shared_set_is_the_chunks_counted_twice(self) -> None:
        counts = self.m.refcounts.as_dict()
        assert self.m.refcounts.shared == {h for h, n in counts.items() if n >= 2}
        codes = {code_of(h) for h in self.m.refcounts.shared} - {None}
        assert self.m.refcounts.shared.codes == codes

    @invariant()
    def forks_match_model(self) -> None:
        assert {
            f.fork_id: (f.session_id, f.hashes, f.created_ts) for f in self.m.forks.values()
        } == self.open

    @invariant()
    def suspended_count_is_kept(self) -> None:
        assert self.m.suspended_count == sum(s.suspended for s in self.m.sessions.values())

    @invariant()
    def parked_counts_match_model(self) -> None:
        assert self.m.parked == recompute_parked(self.m.sessions.values())


ManagerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestManagerMachine = ManagerMachine.TestCase
