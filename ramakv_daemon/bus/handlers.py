"""The commands' handlers: a client's event (the event_id protocol or the pipeline), and
background work's, each applying its change in one step, committing it through the unit
of work (its trace record goes out at the commit) and reporting it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ramakv_daemon.bus.commands import (
    ActIdle,
    Action,
    BackgroundEvent,
    ClientEvent,
    Command,
    DeleteDead,
    ExpireForks,
)
from ramakv_daemon.bus.messagebus import Handler
from ramakv_daemon.core.catalogue import JsonObject, Limits, check_required
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import RamAKvError
from ramakv_daemon.handlers import Registry
from ramakv_daemon.handlers.messages import Message
from ramakv_daemon.handlers.registry import NO_EFFECTS
from ramakv_daemon.pipeline.idempotency import EventIds, Reply, Run
from ramakv_daemon.pipeline.outcome import Outcome
from ramakv_daemon.pipeline.reactions import Reactions
from ramakv_daemon.pipeline.trace_records import TraceRecords
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork
from ramakv_daemon.ports import StoreError
from ramakv_daemon.routing.namespaces import Namespace, Namespaces
from ramakv_daemon.telemetry.log_text import loggable
from ramakv_daemon.telemetry.metrics import DaemonMetrics

log = logging.getLogger("ramakv")

# The loop thread's CPU one idle batch may take before it is committed: a client event
# arriving meanwhile waits at most about this long (a 128-hash suspend is ~0.2 ms, a
# 512-hash one on a restored 10,000 x 512 store ~0.7 ms; the first event of a batch is
# always applied, whatever it costs, and the next one only when the one before says it
# fits). 2 ms put health's p99 during a restart's sweep at 2.5x its steady value, 1 ms at
# 2.0x (bench.idle_restart, 10,000 x 512).
STEP_CPU_S = 0.001
# Events in one idle batch at most: what a read answered from committed state takes out
# and puts back while the batch's commit is under way.
MAX_BATCH = 32


class ClientEvents:
    """Handles :class:`ClientEvent`: one decoded body, end to end. An ``event_id`` makes
    the event idempotent: a retry gets the first answer back (remembered durably with the
    change, for ``idempotency_window`` ids). ``run``: the pipeline's, stale copies
    released and claimed sessions adopted first (:class:`~ramakv_daemon.bus.ownership.OwnedFirst`),
    as ``event_ids`` runs it too."""

    def __init__(self, run: Run, event_ids: EventIds) -> None:
        self.run = run
        self.event_ids = event_ids

    async def __call__(self, command: ClientEvent, _uow: UnitOfWork) -> Reply:
        payload = command.payload
        if not isinstance(payload, dict):
            return 400, {"ok": False, "error": "request body must be a JSON object"}
        if "event_id" not in payload:
            return await self.run(payload, None)
        return await self.event_ids.handle(payload)


class BackgroundEvents:
    """Handles :class:`BackgroundEvent`: the pipeline's run (stale copies released first),
    the event alone; the bus has admitted it to the background lane."""

    def __init__(self, run: Run) -> None:
        self.run = run

    async def __call__(self, command: BackgroundEvent, _uow: UnitOfWork) -> Reply:
        return await self.run(command.payload, None)


class _SweepHandler:
    """What a sweep's handler reads: the namespaces, the trace records (each change's
    delta), the metrics it counts in and the clock its pass reads."""

    def __init__(
        self,
        namespaces: Namespaces,
        records: TraceRecords,
        metrics: DaemonMetrics,
        clock: Callable[[], float],
    ) -> None:
        self.namespaces = namespaces
        self.records = records
        self.metrics = metrics
        self.clock = clock


class ExpiringForks(_SweepHandler):
    """Handles :class:`ExpireForks`: a namespace's expired holds, as one change."""

    async def __call__(self, command: ExpireForks, uow: UnitOfWork) -> int:
        ns, ttl = self.namespaces[command.namespace], command.ttl_s
        change = ns.manager.expire_forks(self.clock(), ttl)
        if change is None:
            return 0
        expired = change.data["expired"]
        assert isinstance(expired, list)
        touched = sorted({str(r["session_id"]) for r in expired})
        delta = self.records.delta(change, ns.key)  # before the await: this change's
        o = Outcome("fork_expire", None, change, ns, NO_EFFECTS, delta=delta, touched=touched)
        try:
            await uow.commit(ns, change, (o,))
        except StoreError as err:  # rolled back: the next pass tries again
            log.error("fork expiry not persisted (will retry): %s", err)
            return 0
        for row in expired:
            log.warning(
                "fork hold expired: session=%s fork_id=%s age=%.0fs (older than "
                "fork_hold_ttl_s=%g; its session_fork_end never came)%s",
                loggable(str(row["session_id"])),
                row["fork_id"],
                row["age_s"],
                ttl,
                f" namespace={ns.key}" if ns.key else "",
            )
        self.metrics.forks_expired.inc(len(expired))
        return len(expired)


class DeletingDead(_SweepHandler):
    """Handles :class:`DeleteDead`: one slice of a namespace's dead chunks, as one change."""

    async def __call__(self, command: DeleteDead, uow: UnitOfWork) -> int | None:
        ns, now = self.namespaces[command.namespace], self.clock()
        change = ns.manager.sweep_dead(now, command.limit)
        if change is None:
            return None
        delta = self.records.delta(change, ns.key)  # before the await: this change's
        o = Outcome("retention_sweep", None, change, ns, NO_EFFECTS, delta=delta)
        try:
            await uow.commit(ns, change, (o,))
        except StoreError as err:
            # Rolled back: still dead, looked at again by the next pass.
            ns.manager.last_refs.released_now(change.evict_delete, "", now - command.window_s)
            log.error("retention sweep not persisted (will retry): %s", err)
            return None
        n = len(change.evict_delete)
        self.metrics.retention_deleted.inc(n)
        return n


def action_of(o: Outcome) -> Action:
    """What an applied policy event did, from its reply data."""
    if o.type_ == "session_close":
        return "close" if o.data.get("closed") else ""
    return "suspend" if o.data.get("suspended") else ""


class ActingIdle:
    """Handles :class:`ActIdle`: a namespace's due policy events applied as a batch in one
    synchronous step (so no read sees it before it is submitted for commit) taking at most
    about ``step_cpu_s`` of the loop's CPU; one commit and one outbox row for the batch,
    each event still its own trace record, counted and logged as the pipeline does."""

    def __init__(
        self,
        namespaces: Namespaces,
        registry: Registry,
        limits: Limits,
        records: TraceRecords,
        reactions: Reactions,
        clock: Callable[[], float],
        step_cpu_s: float = STEP_CPU_S,
        max_batch: int = MAX_BATCH,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.namespaces = namespaces
        self.registry = registry
        self.limits = limits
        self.records = records
        self.reactions = reactions
        self.clock = clock
        self.step_cpu_s = step_cpu_s
        self.max_batch = max_batch
        self.cpu_clock = cpu_clock

    async def __call__(self, command: ActIdle, uow: UnitOfWork) -> list[Action]:
        """Apply payloads from the first until the batch size is spent or the next one
        would take the step past its CPU (judged by the one before: two 512-hash suspends
        of ~0.7 ms each made most steps 1.4-1.6 ms), commit what they changed as one change,
        then react to each."""
        ns = self.namespaces[command.namespace]
        actions: list[Action] = []
        writing: list[tuple[int, Outcome]] = []
        merged = Change()
        began = last = self.cpu_clock()
        cost = 0.0  # the last event's CPU: the next one's guess
        for payload in command.payloads:
            if actions and (
                len(actions) >= self.max_batch or last - began + cost > self.step_cpu_s
            ):
                break
            o = self._apply(ns, payload)
            if o is None:
                actions.append("failed")
            elif o.change.writes:
                merged.fold(o.change)
                writing.append((len(actions), o))
                actions.append("failed")  # until its commit
            else:  # its condition held it back: traced as the pipeline does
                await self.reactions.succeeded(o)
                actions.append(action_of(o))
            now = self.cpu_clock()
            cost, last = now - last, now
        if not writing:
            return actions
        try:
            # Their records go out at the commit, in order.
            await uow.commit(ns, merged, [o for _, o in writing])
        except StoreError as err:  # rolled back whole: the next sweep looks again
            log.warning(
                "idle policy batch of %d events not committed (will retry): %s", len(writing), err
            )
            for _, o in writing:
                self.reactions.failed(o.type_, o.session_id, str(err), o.started)
            return actions
        for i, o in writing:
            await self.reactions.succeeded(o)
            actions[i] = action_of(o)
        return actions

    def _apply(self, ns: Namespace, payload: JsonObject) -> Outcome | None:
        """One policy event applied with its trace delta taken at once; None when refused
        (counted, logged and traced as the pipeline does)."""
        started = time.perf_counter()
        type_ = str(payload["type"])
        sid = payload.get("session_id")
        session_id = sid if isinstance(sid, str) else None
        try:
            handler = self.registry.get(type_)
            # Typed as the pipeline's entry decodes it; else the payload, parsed by the apply.
            event: Message | JsonObject | None = handler.decode(payload, self.limits)
            if event is None:
                check_required(handler.spec, payload)
                event = payload
            apply = handler.apply
            assert apply is not None  # a policy's events change state
            change = apply(ns.ctx, event, self.clock())
            if not isinstance(change, Change):  # a sliced read: never a policy's event
                raise TypeError(f"{type_} is not a plain change")
        except (RamAKvError, ValueError, TypeError) as err:
            self.reactions.failed(type_, session_id, str(err), started)
            log.warning(
                "idle policy %s of session %s refused: %s",
                type_,
                loggable(session_id or ""),
                loggable(str(err)),
            )
            return None
        delta = self.records.delta(change, ns.key)  # before any await: this change's own
        return Outcome(type_, session_id, change, ns, handler.effects, started, None, delta)


def handlers_of(
    run: Run,
    event_ids: EventIds,
    namespaces: Namespaces,
    registry: Registry,
    limits: Limits,
    records: TraceRecords,
    reactions: Reactions,
    metrics: DaemonMetrics,
    clock: Callable[[], float],
) -> dict[type[Command[Any]], Handler]:
    """Every command's handler (the composition root's registry)."""
    return {
        ClientEvent: ClientEvents(run, event_ids),
        BackgroundEvent: BackgroundEvents(run),
        ExpireForks: ExpiringForks(namespaces, records, metrics, clock),
        DeleteDead: DeletingDead(namespaces, records, metrics, clock),
        ActIdle: ActingIdle(namespaces, registry, limits, records, reactions, clock),
    }
