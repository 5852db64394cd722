"""The composition root: builds the daemon's parts in dependency order and starts and
stops them (the HTTP app, the benchmarks and the tests all build the daemon here)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ramakv_daemon.adapters.backends.factory import lmcache_factory
from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bus.budget import BusDemotions, DemotingOverBudget
from ramakv_daemon.bus.commands import (
    AdoptSession,
    BackgroundEvent,
    CheckOwners,
    ClientEvent,
    Command,
    DemoteOverBudget,
    ReleaseSession,
    SettleOwed,
)
from ramakv_daemon.bus.handlers import handlers_of
from ramakv_daemon.bus.messagebus import Dispatch, Handler, MessageBus
from ramakv_daemon.bus.ownership import (
    AdoptingSessions,
    CheckingOwners,
    MovedForks,
    OwnedFirst,
    OwnerChecks,
    ReleasingSessions,
    SettlingOwed,
)
from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.commit.ledger import OutboxLedger
from ramakv_daemon.config import Config
from ramakv_daemon.core.budget import BudgetState
from ramakv_daemon.core.catalogue import JsonObject, Limits
from ramakv_daemon.core.fork import ForkIds
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.delivery.delivery_state import NamespaceState
from ramakv_daemon.delivery.dispatcher import BackendDispatcher
from ramakv_daemon.delivery.window_report import report_window
from ramakv_daemon.deployments import DEFAULT_NAMESPACE, Deployment
from ramakv_daemon.handlers import DEFAULT_REGISTRY, HandlerContext, Registry
from ramakv_daemon.ownership.notices import Notices
from ramakv_daemon.ownership.ownership import Ownership
from ramakv_daemon.pipeline.budget_policy import BudgetPolicy
from ramakv_daemon.pipeline.debug_files import DebugWriter
from ramakv_daemon.pipeline.idempotency import AnswerCache, EventIds, Reply
from ramakv_daemon.pipeline.lanes import Lanes
from ramakv_daemon.pipeline.pipeline import Pipeline
from ramakv_daemon.pipeline.reactions import (
    Reactions,
    publish_budget,
    publish_event,
    send_demotions,
    send_prefetch,
    warn_forced,
)
from ramakv_daemon.pipeline.trace_records import TraceRecords, publish_backend_failure
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork
from ramakv_daemon.ports import (
    Backend,
    BackendFactory,
    BackendResult,
    OutboxFeed,
    SessionStore,
)
from ramakv_daemon.restore import restore
from ramakv_daemon.routing.namespaces import Namespace, Namespaces
from ramakv_daemon.sweeps.fork_expiry import ForkExpiry
from ramakv_daemon.sweeps.idle_policy import IdleSweep
from ramakv_daemon.sweeps.l2_budget import L2BudgetSweep, evidence
from ramakv_daemon.sweeps.retention import RetentionSweep
from ramakv_daemon.telemetry.metrics import DaemonMetrics
from ramakv_daemon.trace.hub import TraceHub

log = logging.getLogger("ramakv")


def make_backend(config: Config) -> Backend:
    """The noop backend, or the configured `backend` at lmcache_url."""
    if config.noop_backend:
        return NoopBackend()
    return lmcache_factory(config)(config.lmcache_url, config.evict_locations)


class UnsteeredBackend(NoopBackend):
    """The backend of a namespace with no valid identity: accepts and sends nothing."""

    name = "unsteered"


def backend_of(
    key: str,
    dep: Deployment | None,
    config: Config,
    default_backend: Backend,
    factory: BackendFactory,
) -> tuple[Backend, Backend | None, int]:
    """A namespace's backend, the one it owns (closed at stop; None: the shared default)
    and its DDR budget in chunks."""
    if key == DEFAULT_NAMESPACE:
        return default_backend, None, config.ddr_budget_chunks
    if dep is None or not dep.steered:
        if dep is not None:
            # Loud, once: a miss is always preferred to a wrong hit.
            log.error(
                "deployment %r has no valid identity (%s): its events are accepted "
                "and recorded under %r, but NO prefetch or evict is sent",
                dep.name,
                "; ".join(dep.problems),
                key,
            )
        else:
            log.warning(
                "namespace %r is in the database but not configured: its sessions are "
                "kept (never deleted automatically), nothing is sent to any cache; "
                "ramakv-admin purge-namespace removes them",
                key,
            )
        unsteered = UnsteeredBackend()
        return unsteered, unsteered, 0
    if dep.lmcache_url is None and dep.evict_locations is None:
        return default_backend, None, dep.ddr_budget_chunks
    own = factory(
        dep.lmcache_url or config.lmcache_url,
        dep.evict_locations if dep.evict_locations is not None else config.evict_locations,
    )
    return own, own, dep.ddr_budget_chunks


@dataclass(frozen=True, slots=True)
class NamespaceParts:
    """What every namespace is built from (:meth:`build`, called on a namespace's first use:
    configured ones at start-up, those found only in the database as they are loaded)."""

    config: Config
    registry: Registry
    limits: Limits
    feed: OutboxFeed
    default_backend: Backend
    backend_factory: BackendFactory
    on_result: Callable[[str, int, BackendResult], None] | None
    on_failure: Callable[[str, int, BackendResult, int], None] | None
    on_window: Callable[[str, str, list[str], float], None] | None
    on_cancel: Callable[[str, int], None] | None = None  # a prefetch its turn_end dropped

    def build(self, namespaces: Namespaces, key: str) -> Namespace:
        """Namespace ``key``'s manager, handler context, dispatcher and budget."""
        cfg, dep = self.config, namespaces.deployments.get(key)
        manager = SessionManager(
            turn_start_prefetch=cfg.turn_start_prefetch,
            max_sessions=cfg.max_sessions,
            namespace=key,
            fork_ids=namespaces.fork_ids,
            max_forks_per_session=cfg.max_forks_per_session,
            retain_unreferenced_s=cfg.retain_unreferenced_s,
        )
        ctx = HandlerContext(
            manager,
            self.limits,
            self.registry,
            namespaces.managers,
            namespaces.describe,
            node_id=cfg.node_id if cfg.session_store_url else "",
        )
        backend, own, budget = backend_of(key, dep, cfg, self.default_backend, self.backend_factory)
        dispatcher = BackendDispatcher(
            backend,
            NamespaceState(manager, self.feed),
            # The noop backend sends nothing: counted, its "calls" would read as steering.
            None if backend.name == "noop" else self.on_result,
            self.on_failure,
            namespace=key,
            defer_s=cfg.evict_defer_s,
            on_window=None if self.on_window is None else partial(self.on_window, key),
            on_cancel=None if backend.name == "noop" else self.on_cancel,
        )
        budget_state = BudgetState(
            budget, cfg.turn_in_flight_timeout_s, cfg.budget_check_interval_s
        )
        return Namespace(key, manager, ctx, dispatcher, budget_state, dep, own)


def make_store(config: Config) -> SessionStore:
    """PostgreSQL when session_store_url is set, else the SQLite file."""
    if config.session_store_url:
        from ramakv_daemon.adapters.postgres.store import PostgresSessionStore

        return PostgresSessionStore(
            config.session_store_url, config.node_id, config.postgres_pool_size
        )
    return SqliteSessionStore(
        config.session_store_path, config.sqlite_synchronous, config.sqlite_commit_thread
    )


@dataclass(eq=False)
class Daemon:
    """Every part of one daemon, built by :func:`build`; :meth:`start` and :meth:`stop`
    run its life cycle. ``bus.handle(ClientEvent(payload))`` (or :meth:`handle`) handles
    one event."""

    config: Config
    store: SessionStore
    backend: Backend  # the default namespace's (deployments may have their own)
    registry: Registry
    metrics: DaemonMetrics
    trace: TraceHub
    committer: GroupCommitter
    namespaces: Namespaces
    records: TraceRecords
    ownership: Ownership
    owner_checks: OwnerChecks  # asks the bus to check (and release) what ownership is told
    answers: AnswerCache
    fork_expiry: ForkExpiry
    idle_sweep: IdleSweep
    retention: RetentionSweep
    bus: MessageBus  # every command: client events, ownership's releases, background work
    clock: Callable[[], float]  # the wall clock events and sweeps read
    # Client events first: the service counts them, background work waits its turn here.
    lanes: Lanes = field(default_factory=Lanes)
    # Set by the command line, which calls listening() once the port is bound: the idle
    # policies' first sweep then runs after it, not while the port is being bound.
    sweep_after_listening: bool = False
    # The stock servers' disk budgets (l2_budget_bytes): one per fs L2 folder configured.
    l2_budgets: list[L2BudgetSweep] = field(default_factory=list)
    _subscribers_closed: bool = field(default=False, repr=False)
    _stopping: bool = field(default=False, repr=False)
    _sweep_start: asyncio.Task[None] | None = field(default=None, repr=False)

    async def handle(self, payload: object) -> Reply:
        """One decoded request body, a client's event through the bus; (HTTP status,
        response envelope)."""
        return await self.bus.handle(ClientEvent(payload))

    @property
    def background_run(self) -> Callable[[JsonObject, None], Awaitable[Reply]]:
        """An event as a :class:`BackgroundEvent` through the bus (the pipeline's run in the
        background lane): the entry for a sweep's events, which then yield to clients."""
        return background_events(self.bus)

    @property
    def default(self) -> Namespace:
        """The namespace of events that name none (and of sessions that exist nowhere)."""
        return self.namespaces[self.namespaces.default]

    async def start(self) -> None:
        """Open the store, restore every session, start the writer and the deliveries."""
        t0 = time.perf_counter()
        await self.store.open()
        try:
            await restore(
                self.store,
                self.namespaces,
                self.committer,
                self.answers,
                self.config.idempotency_window,
                self.config.store_shown,
                t0,
                self.clock(),
            )
        except BaseException:
            # A corrupt page found while loading: close the store (and its worker
            # threads) so the process can exit and a supervisor sees it fail.
            await self.store.close()
            raise
        self.committer.start()
        # Stock-server routes moved during 2026: say at start what a cache lacks.
        await self.backend.start()
        for ns in self.namespaces:
            if ns.own_backend is not None:
                await ns.own_backend.start()
        for ns in self.namespaces:
            if ns.dispatcher.backlog:
                log.info(
                    "ram-a-kv %d evictions of namespace %r from the outbox %s",
                    ns.dispatcher.backlog,
                    ns.key,
                    "will be retried"
                    if ns.delivers
                    else "are kept (namespace not configured: nothing is sent)",
                )
            if ns.delivers:
                ns.dispatcher.start()
        await self.owner_checks.start()  # what a shared store says was lost while away
        await self.fork_expiry.start()
        await self.retention.start()
        if not self.sweep_after_listening:
            await self.idle_sweep.start()
        for sweep in self.l2_budgets:
            await sweep.start()

    def listening(self) -> None:
        """Once the port accepts connections: what start-up left for then, next on the
        loop: the metrics' registry (prometheus_client; the first count or scrape would
        build it as well) and, with ``sweep_after_listening``, the idle policies' loop
        (its first sweep counts in the metrics)."""
        loop = asyncio.get_running_loop()
        loop.call_soon(self.metrics.build)
        loop.call_soon(_log_version)
        if self.sweep_after_listening and not self._stopping and self._sweep_start is None:
            self._sweep_start = loop.create_task(self.idle_sweep.start())

    def close_subscribers(self) -> None:
        """Wake every trace subscriber with the close sentinel (the first step of a
        shutdown: their websocket handlers then end); once."""
        if not self._subscribers_closed:
            self._subscribers_closed = True
            self.trace.close_all("daemon shutting down")

    async def stop(self) -> None:
        """Close subscribers, flush commits and backend calls, close the store."""
        self._stopping = True
        if self._sweep_start is not None:
            await self._sweep_start  # it only starts the loop: it has its task once done
        await self.idle_sweep.close()
        for sweep in self.l2_budgets:
            await sweep.close()
        await self.fork_expiry.close()
        await self.retention.close()
        self.close_subscribers()
        for ns in self.namespaces:
            await ns.dispatcher.close()
        for ns in self.namespaces:
            if ns.delivers:
                await ns.dispatcher.drain()
        await self.owner_checks.close()
        await self.committer.close()
        await self.store.close()
        await self.backend.close()
        for ns in self.namespaces:
            if ns.own_backend is not None:
                await ns.own_backend.close()


def build(
    config: Config,
    store: SessionStore | None = None,
    backend: Backend | None = None,
    *,
    registry: Registry = DEFAULT_REGISTRY,
    backend_factory: BackendFactory | None = None,
    clock: Callable[[], float] = time.time,
) -> Daemon:
    """The daemon for ``config``: each part built once, after what it needs.

    ``store`` and ``backend`` default to the config's (``backend`` steers the unnamed
    default namespace and every deployment without its own lmcache_url;
    ``backend_factory(url, evict_locations)`` builds the others). ``clock`` is the wall
    clock events, fork expiry and the idle policies read (tests inject one).
    """
    store = store or make_store(config)
    backend = backend or make_backend(config)
    metrics = DaemonMetrics({s.name for s in registry.specs()})
    trace = TraceHub(
        config.trace_buffer,
        config.trace_queue,
        config.trace_buffer_bytes,
        on_drop=metrics.subscriber_dropped,
    )
    fork_ids = ForkIds()  # one counter for the whole store: fork ids are unique in it
    ledger = OutboxLedger()  # what commits leave for delivery, and delivery for them
    limits = Limits(config.max_hashes_per_event, config.max_hash_bytes)
    parts = NamespaceParts(
        config,
        registry,
        limits,
        ledger,
        backend,
        backend_factory or lmcache_factory(config),
        metrics.backend,
        partial(publish_backend_failure, trace),
        partial(report_window, metrics, trace.publish),
        on_cancel=metrics.prefetch_cancel,
    )
    namespaces = Namespaces(config, fork_ids, parts.build)
    namespaces.setup()
    records = TraceRecords(trace, namespaces)
    notices = Notices()  # what a shared store and fenced commits tell ownership
    # A commit tells what it committed, before any waiter resumes: delivery's rows first
    # (each whole), then the trace records in apply order; a fenced one, the sessions.
    committer = GroupCommitter(
        store,
        fork_ids,
        ledger,
        metrics,  # its CommitMeter: each commit's time and batch size
        config.idempotency_ttl_s,
        subscribers=(records, notices),
    )
    uow = UnitOfWork(committer)  # every applied change, an event's or a command's, commits here
    ownership = Ownership(store, namespaces, committer, notices)
    debug = DebugWriter(config.debug_dir) if config.debug_enabled else None
    answers = AnswerCache(config.idempotency_window)
    lanes = Lanes()

    def command_handlers(dispatch: Dispatch) -> dict[type[Command[Any]], Handler]:
        """Every command's handler, given the bus's dispatch (the bus calls this as it is
        built). Background work is typed commands: each handled in the background lane
        (client events first), its change committed by the bus's unit of work, its trace
        record published by the committer's subscriber; the sweeps keep only their timers.
        Ownership's are commands above the pipeline: a release is a session_close (and
        fork ends) run through it; an adopt, a change committed through the unit of work.
        The takeover step below asks for them by raising ReleaseFirst or AdoptFirst, which
        the client events' run (OwnedFirst) answers through the bus. Immediate, in no lane:
        a client event for the session may wait for them (Ownership.before), and a lane
        that waits for that client would never open. The reactions are built here too: the
        DDR budget's pass, once the policy finds one due, is a DemoteOverBudget sent
        through the bus (the pipeline's Demotions port, BusDemotions), between the policy
        and the event's prefetch."""
        reactions = Reactions(
            [
                warn_forced,
                BudgetPolicy(clock),
                send_demotions(BusDemotions(dispatch)),
                send_prefetch,
                publish_event(records),
                publish_budget(records),
            ],
            records,
            metrics,
            namespaces.managers,
            config.trace_events,
        )
        pipeline = Pipeline(
            registry, namespaces, uow, ownership, records, reactions, debug, clock, limits
        )
        run = OwnedFirst(pipeline, ownership, dispatch).run
        forks = MovedForks(ownership, pipeline)
        return {
            **handlers_of(
                run,
                EventIds(answers, committer, run),
                namespaces,
                registry,
                limits,
                records,
                reactions,
                metrics,
                clock,
            ),
            ReleaseSession: ReleasingSessions(ownership, pipeline, forks),
            CheckOwners: CheckingOwners(ownership, forks, dispatch),
            AdoptSession: AdoptingSessions(ownership),
            SettleOwed: SettlingOwed(ownership),
            DemoteOverBudget: DemotingOverBudget(namespaces, metrics),
        }

    bus = MessageBus(command_handlers, lanes, uow)
    # The notices' checker, the LISTEN reconnects and the periodic check ask the bus.
    owner_checks = OwnerChecks(ownership, bus)
    fork_expiry = ForkExpiry(config.fork_hold_ttl_s, namespaces, bus)
    # The idle policies' suspends and closes are events: applied a batch per command, each
    # batch one commit and one delivery pass (on a shared store each is a BackgroundEvent,
    # through the pipeline alone, so each is taken over and fenced on its own).
    idle_sweep = IdleSweep(
        config,
        namespaces,
        background_events(bus),
        metrics,
        clock,
        batched=None if ownership.shared else bus,
    )
    retention = RetentionSweep(config.retain_unreferenced_s, namespaces, bus)
    return Daemon(
        config,
        store,
        backend,
        registry,
        metrics,
        trace,
        committer,
        namespaces,
        records,
        ownership,
        owner_checks,
        answers,
        fork_expiry,
        idle_sweep,
        retention,
        bus,
        clock,
        lanes=lanes,
        l2_budgets=l2_budgets_of(config, namespaces, backend, lanes, clock),
    )


def background_events(bus: MessageBus) -> Callable[[JsonObject, None], Awaitable[Reply]]:
    """A sweep's run(payload, None): each event a :class:`BackgroundEvent` through ``bus``."""

    async def run(payload: JsonObject, _slot: None) -> Reply:
        return await bus.handle(BackgroundEvent(payload))

    return run


def l2_budgets_of(
    config: Config,
    namespaces: Namespaces,
    backend: Backend,
    lanes: Lanes,
    clock: Callable[[], float],
) -> list[L2BudgetSweep]:
    """A disk budget sweep per fs L2 folder with a budget: each deployment with its own
    lmcache_mp_l2_path (its namespace's sessions and its server), then the top-level
    folder (every namespace's sessions, the default server) unless a deployment has it.
    Deletes go through the stock server's adapter where the daemon steers one."""
    sweeps: list[L2BudgetSweep] = []

    def add(path: str, budget: int, named: Iterable[Namespace], via: Backend) -> None:
        referenced, last_used = evidence(named, clock)
        sweep = L2BudgetSweep(
            path,
            config.model_name,
            budget,
            config.l2_check_interval_s,
            referenced,
            via if via.name == "lmcache_mp" else None,
            last_used=last_used,
            # A turn in flight has written its chunks before its turn_end names them.
            grace_s=config.turn_in_flight_timeout_s,
            lanes=lanes,
            clock=clock,
        )
        if sweep.on:
            sweeps.append(sweep)

    own: set[str] = set()
    for ns in namespaces:
        dep = ns.deployment
        if dep is None or dep.l2_path is None or not ns.steered:
            continue
        own.add(dep.l2_path)
        budget = config.l2_budget_bytes if dep.l2_budget_bytes is None else dep.l2_budget_bytes
        add(dep.l2_path, budget, [ns], ns.own_backend or backend)
    if config.lmcache_mp_l2_path not in own:
        add(config.lmcache_mp_l2_path, config.l2_budget_bytes, namespaces, backend)
    return sweeps


def _log_version() -> None:
    """The running version, logged once the daemon serves (the lookup costs ~8 ms)."""
    if log.isEnabledFor(logging.INFO):
        from ramakv_protocol.version import package_version

        log.info("ram-a-kv daemon %s serving", package_version())
