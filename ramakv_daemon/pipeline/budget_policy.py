"""The DDR budget after an event: turns in flight, a demoted session prefetched back, a
demotion pass when over budget (each event's spec says what it means for the budget)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ramakv_daemon.pipeline.outcome import Outcome
from ramakv_daemon.pipeline.reactions import FollowUp
from ramakv_daemon.telemetry.metrics import DaemonMetrics
from ramakv_protocol.records import BudgetBody

log = logging.getLogger("ramakv")

WARN_EVERY_S = 60.0


class BudgetPolicy:
    """A reaction: runs the namespace's budget bookkeeping after each applied event."""

    def __init__(self, metrics: DaemonMetrics, clock: Callable[[], float]) -> None:
        """``clock``: the wall clock events read (injected: tests move it by hand)."""
        self.metrics = metrics
        self.clock = clock
        self._warned: dict[str, float] = {}  # namespace -> last over-budget warning

    def __call__(self, o: Outcome, follow: FollowUp) -> None:
        """Set ``follow.prefetch`` (a session back from demotion is prefetched whole) and
        ``follow.budget_record`` when a pass demoted sessions; send the demotions."""
        ns = o.ns
        b = ns.budget
        if not b.budget or o.delta is None:  # no budget, or a query (changes nothing)
            return
        m, now, sid = ns.manager, self.clock(), o.session_id
        session = m.sessions.get(sid) if sid else None
        back = b.observe(o.effects.turn, sid, session is not None, now)
        if back and not o.change.prefetch and session is not None and not session.suspended:
            follow.prefetch = list(session.unique_hashes())
        if not b.due(o.effects.grows, len(m.refcounts), now):  # cheap test first
            return
        holds = m.fork_holds_by_session() if len(m.forks) else None
        plan = b.plan_fast(m.sessions, m.refcounts.counts, now, holds)
        if not plan.victims:
            return
        b.apply(plan)
        ns.dispatcher.demote(plan.demote)
        self.metrics.budget(ns.label, len(plan.victims), len(plan.demote))
        if plan.over and now - self._warned.get(ns.key, 0.0) >= WARN_EVERY_S:
            # Once a minute per namespace: under sustained pressure every pass is over.
            self._warned[ns.key] = now
            log.warning(
                "namespace %r over its DDR budget (%d > %d chunks): the rest is in flight",
                ns.key,
                plan.usage_after,
                plan.budget,
            )
        record: BudgetBody = {
            "kind": "budget",
            "ts": now,
            "namespace": ns.key,
            "victims": plan.victims,
            "demote": plan.demote,
            "usage_before": plan.usage_before,
            "usage_after": plan.usage_after,
            "budget": plan.budget,
        }
        follow.budget_record = record
