"""DDR budget per namespace: which whole sessions' private chunks to demote, purely."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from ramakv_daemon.core.retention import Candidate, retention_order
from ramakv_daemon.core.session import Session


class Turn(Enum):
    """What an event means for its session's turn in flight, as the budget sees it (each
    event's spec declares it, with whether the event can bring chunks into DDR)."""

    NONE = "none"  # no bearing on the turn (reads, forks, admin events)
    START = "start"  # a turn begins: the session is pinned in DDR and back from demotion
    FINISH = "finish"  # the turn's map arrives (turn_end, a restore): unpinned and back
    LEAVE = "leave"  # the session stops using DDR (suspend, close): unpinned


@dataclass(frozen=True, slots=True)
class Holder:
    """A session as the budget sees it.

    Attributes:
        candidate: its retention facts.
        hashes: every chunk it holds a reference on (active map and fork holds).
        demoted: True when the budget already moved its private chunks out of DDR.
    """

    candidate: Candidate
    hashes: frozenset[str]
    demoted: bool = False

    @property
    def in_ddr(self) -> bool:
        """Entitled to DDR: not demoted, or using its chunks right now (turn in flight)."""
        return not self.demoted or self.candidate.in_flight


@dataclass(slots=True)
class Plan:
    """What to demote to get back under budget.

    Attributes:
        victims: sessions demoted now, in retention order.
        demote: their private chunks (held by no session still entitled to DDR).
        usage_before: DDR-resident chunks before (held by a not-demoted session).
        usage_after: the same after the plan.
        budget: the budget in chunks.
    """

    victims: list[str] = field(default_factory=list)
    demote: list[str] = field(default_factory=list)
    usage_before: int = 0
    usage_after: int = 0
    budget: int = 0

    @property
    def over(self) -> bool:
        """Still over budget: every eligible session is demoted (the rest are in flight)."""
        return self.usage_after > self.budget


def resident(holders: Iterable[Holder]) -> set[str]:
    """Chunks a holder entitled to DDR references: what the daemon expects in DDR."""
    out: set[str] = set()
    for h in holders:
        if h.in_ddr:
            out |= h.hashes
    return out


def plan_demotions(holders: Iterable[Holder], budget: int) -> Plan:
    """Demote whole sessions in retention order until resident chunks fit ``budget``.

    A chunk is demoted only when the victim is its last not-demoted holder, so a chunk
    shared with a session still entitled to DDR (in particular one with a turn in flight,
    which is never a victim) is never demoted. ``budget <= 0`` means no budget.
    """
    holders = list(holders)
    held: Counter[str] = Counter()
    for h in holders:
        if h.in_ddr:
            held.update(h.hashes)
    usage = len(held)
    plan = Plan(usage_before=usage, usage_after=usage, budget=budget)
    if budget <= 0 or usage <= budget:
        return plan
    by_id = {h.candidate.session_id: h for h in holders if h.in_ddr}
    for sid in retention_order(h.candidate for h in by_id.values()):
        if usage <= budget:
            break
        victim = by_id[sid]
        private = sorted(x for x in victim.hashes if held[x] == 1)
        for x in victim.hashes:
            held[x] -= 1
            if not held[x]:
                del held[x]
        plan.victims.append(sid)
        plan.demote.extend(private)
        usage -= len(private)
    plan.usage_after = usage
    return plan


ForkHolds = Mapping[str, Sequence[tuple[str, ...]]]  # session id -> its open forks' hashes


def contribution(session: Session, fork_holds: Sequence[tuple[str, ...]] = ()) -> Counter[str]:
    """The references ``session`` adds to the refcount table: its active map's distinct
    hashes once each, and every hash of every open fork of it."""
    out: Counter[str] = Counter(session.held_hashes())
    for hold in fork_holds:
        out.update(hold)
    return out


def plan_from_refcounts(
    sessions: Mapping[str, Session],
    refcounts: Mapping[str, int],
    demoted: set[str],
    in_flight: set[str],
    budget: int,
    fork_holds: ForkHolds | None = None,
) -> Plan:
    """:func:`plan_demotions` from the live refcount table: the same plan, without
    building a hash set for every session.

    A chunk's references from sessions entitled to DDR are its refcount minus the
    references of demoted sessions not in flight; it is resident while that is positive,
    and private to a victim when all of them are the victim's own. The cost is the sort
    of the sessions plus the demoted sessions' and the victims' references, not every
    reference the namespace holds (tests/budget proves both plans equal).
    """
    holds = fork_holds or {}
    parked: Counter[str] = Counter()
    for sid in demoted:
        s = sessions.get(sid)
        if s is not None and sid not in in_flight:
            parked.update(contribution(s, holds.get(sid, ())))
    usage = len(refcounts) - sum(1 for h, n in parked.items() if refcounts.get(h, 0) <= n)
    plan = Plan(usage_before=usage, usage_after=usage, budget=budget)
    if budget <= 0 or usage <= budget:
        return plan
    candidates = (
        Candidate(sid, s.suspended, s.last_event_ts, sid in in_flight)
        for sid, s in sessions.items()
        if sid not in demoted or sid in in_flight
    )
    for sid in retention_order(candidates):
        if usage <= budget:
            break
        mine = contribution(sessions[sid], holds.get(sid, ()))
        private = sorted(h for h, n in mine.items() if refcounts.get(h, 0) - parked[h] == n)
        parked.update(mine)
        plan.victims.append(sid)
        plan.demote.extend(private)
        usage -= len(private)
    plan.usage_after = usage
    return plan


def holder_of(
    session: Session,
    *,
    demoted: bool,
    in_flight: bool,
    fork_holds: Sequence[tuple[str, ...]] = (),
) -> Holder:
    """The budget's view of a session: active map (unless suspended) plus its forks."""
    hashes = set(session.held_hashes())
    for hold in fork_holds:
        hashes.update(hold)
    return Holder(
        Candidate(session.session_id, session.suspended, session.last_event_ts, in_flight),
        frozenset(hashes),
        demoted,
    )


@dataclass(slots=True)
class BudgetState:
    """One namespace's budget bookkeeping (advisory, in memory; rebuilt empty at start).

    Attributes:
        budget: chunks allowed in DDR (0 = no budget).
        in_flight_timeout_s: a turn_start older than this no longer pins its session.
        demoted: sessions whose private chunks the budget moved to disk.
        in_flight: session id -> time of its turn_start not yet matched by a turn_end.
        check_interval_s: a pass costs O(references): at most one per this many seconds.
        last_check: when the last pass ran.
    """

    budget: int = 0
    in_flight_timeout_s: float = 600.0
    check_interval_s: float = 1.0
    last_check: float = float("-inf")
    demoted: set[str] = field(default_factory=set)
    in_flight: dict[str, float] = field(default_factory=dict)

    def observe(self, turn: Turn, session_id: str | None, exists: bool, now: float) -> bool:
        """Track one successful event (``turn``: what its spec says it means for the
        session's turn); True when the session comes back from demotion."""
        if session_id is None:
            return False
        back = False
        if turn is Turn.START and exists:
            self.in_flight[session_id] = now
            back = session_id in self.demoted
            self.demoted.discard(session_id)
        elif turn is Turn.FINISH:
            self.in_flight.pop(session_id, None)
            back = session_id in self.demoted
            self.demoted.discard(session_id)
        elif turn is Turn.LEAVE:
            self.in_flight.pop(session_id, None)
        if not exists:
            self.demoted.discard(session_id)
            self.in_flight.pop(session_id, None)
        return back

    def due(self, grows: bool, referenced: int, now: float) -> bool:
        """Whether to run a pass after an event: only one that can bring chunks into DDR
        (``grows``, from its spec), only when more chunks are referenced than the budget,
        at most every ``check_interval_s``."""
        if not self.budget or referenced <= self.budget or not grows:
            return False
        if now - self.last_check < self.check_interval_s:
            return False
        self.last_check = now
        return True

    def plan_fast(
        self,
        sessions: Mapping[str, Session],
        refcounts: Mapping[str, int],
        now: float,
        fork_holds: ForkHolds | None = None,
    ) -> Plan:
        """:meth:`plan` computed from the live refcount table (what the daemon runs)."""
        self.demoted &= sessions.keys()
        stale = now - self.in_flight_timeout_s
        flying = {sid for sid, t in self.in_flight.items() if t >= stale and sid in sessions}
        return plan_from_refcounts(
            sessions, refcounts, self.demoted, flying, self.budget, fork_holds
        )

    def plan(
        self, sessions: Mapping[str, Session], now: float, fork_holds: ForkHolds | None = None
    ) -> Plan:
        """The demotions needed now (does not apply them; see :meth:`apply`)."""
        self.demoted &= sessions.keys()
        stale = now - self.in_flight_timeout_s
        holders = [
            holder_of(
                s,
                demoted=sid in self.demoted,
                in_flight=self.in_flight.get(sid, -1.0) >= stale,
                fork_holds=(fork_holds or {}).get(sid, ()),
            )
            for sid, s in sessions.items()
        ]
        return plan_demotions(holders, self.budget)

    def apply(self, plan: Plan) -> None:
        """Record the plan's victims as demoted."""
        self.demoted.update(plan.victims)
