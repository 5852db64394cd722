"""The DDR budget's demotions as a command: the pass's handler, and the reaction that sends
it through the bus when the budget policy finds one due."""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from ramakv_daemon.bus.commands import DemoteOverBudget
from ramakv_daemon.bus.messagebus import Dispatch
from ramakv_daemon.pipeline.outcome import Outcome
from ramakv_daemon.pipeline.reactions import FollowUp
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork
from ramakv_daemon.routing.namespaces import Namespaces
from ramakv_daemon.telemetry.metrics import DaemonMetrics
from ramakv_protocol.records import BudgetBody

log = logging.getLogger("ramakv")

WARN_EVERY_S = 60.0


class DemotingOverBudget:
    """Handles :class:`DemoteOverBudget`: plans and applies one pass in a single step (no
    await: the event that asked for it sees no other event in between), hands the
    demotions to delivery, counts them and answers the pass's trace record."""

    def __init__(self, namespaces: Namespaces, metrics: DaemonMetrics) -> None:
        self.namespaces = namespaces
        self.metrics = metrics
        self._warned: dict[str, float] = {}  # namespace -> last over-budget warning

    async def __call__(self, command: DemoteOverBudget, _uow: UnitOfWork) -> BudgetBody | None:
        ns, now = self.namespaces[command.namespace], command.now
        b, m = ns.budget, ns.manager
        holds = m.fork_holds_by_session() if len(m.forks) else None
        plan = b.plan_fast(m.sessions, m.refcounts.counts, now, holds)
        if not plan.victims:
            return None
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
        return {
            "kind": "budget",
            "ts": now,
            "namespace": ns.key,
            "victims": plan.victims,
            "demote": plan.demote,
            "usage_before": plan.usage_before,
            "usage_after": plan.usage_after,
            "budget": plan.budget,
        }


class SendDemotions:
    """A reaction (the pipeline's port, given it by the composition root): the pass the
    budget policy found due is a :class:`DemoteOverBudget` through the bus (``dispatch``),
    its record the event's follow-up. Runs after the policy and before the event's
    prefetch, so the demotions go out first, as the pass always did."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch

    def __call__(self, o: Outcome, follow: FollowUp) -> Awaitable[None] | None:
        if follow.budget_due is None:
            return None  # the common case: no pass, no coroutine
        return self._send(o.ns.key, follow.budget_due, follow)

    async def _send(self, key: str, now: float, follow: FollowUp) -> None:
        follow.budget_record = await self.dispatch(DemoteOverBudget(key, now))
