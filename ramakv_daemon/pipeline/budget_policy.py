"""The DDR budget after an event: turns in flight, a demoted session prefetched back, a
demotion pass found due when over budget (each event's spec says what it means for the
budget; the pass itself is the bus's DemoteOverBudget command)."""

from __future__ import annotations

from collections.abc import Callable

from ramakv_daemon.pipeline.outcome import Outcome
from ramakv_daemon.pipeline.reactions import FollowUp


class BudgetPolicy:
    """A reaction: runs the namespace's budget bookkeeping after each applied event."""

    def __init__(self, clock: Callable[[], float]) -> None:
        """``clock``: the wall clock events read (injected: tests move it by hand)."""
        self.clock = clock

    def __call__(self, o: Outcome, follow: FollowUp) -> None:
        """Set ``follow.prefetch`` (a session back from demotion is prefetched whole) and
        ``follow.budget_due`` when a demotion pass is due (a later reaction sends it)."""
        ns = o.ns
        b = ns.budget
        if not b.budget or o.delta is None:  # no budget, or a query (changes nothing)
            return
        m, now, sid = ns.manager, self.clock(), o.session_id
        session = m.sessions.get(sid) if sid else None
        back = b.observe(o.effects.turn, sid, session is not None, now)
        if back and not o.change.prefetch and session is not None and not session.suspended:
            follow.prefetch = list(session.unique_hashes())
        if b.due(o.effects.grows, len(m.refcounts), now):  # cheap test first
            follow.budget_due = now
