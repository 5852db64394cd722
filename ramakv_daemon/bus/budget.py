"""The DDR budget's demotions as a command: the pass's handler, and the pipeline's port a due
pass is sent through, implemented by sending that command."""

from __future__ import annotations

import logging

from ramakv_daemon.bus.commands import DemoteOverBudget
from ramakv_daemon.bus.messagebus import Dispatch
from ramakv_daemon.pipeline.reactions import Demotions
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


class BusDemotions(Demotions):
    """The pipeline's :class:`~ramakv_daemon.pipeline.reactions.Demotions` port, the bus's
    side: a due pass is a :class:`DemoteOverBudget` sent through ``dispatch`` (immediate,
    and its handler never awaits: handled within the event's own loop step)."""

    __slots__ = ("dispatch",)

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch

    async def demote(self, namespace: str, now: float) -> BudgetBody | None:
        return await self.dispatch(DemoteOverBudget(namespace, now))
