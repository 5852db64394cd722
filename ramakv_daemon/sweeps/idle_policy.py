"""Idle policies: a session with no event for idle_suspend_s is suspended, for idle_close_s
closed (``inferred``: nothing is deleted on them); each as a host's event, applied by its
handler, traced and counted like any other; a batch of them shares one commit and one
delivery pass (the bus's ActIdle), or, on a shared store, each goes through the event
pipeline alone (taken over and fenced like any other change)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ramakv_daemon.bus.commands import ActIdle, Action
from ramakv_daemon.bus.messagebus import MessageBus
from ramakv_daemon.config import Config
from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.handlers.idle_condition import FIELD
from ramakv_daemon.handlers.reason import INFERRED
from ramakv_daemon.ownership.ownership import Ownership
from ramakv_daemon.routing.namespaces import Namespace, Namespaces
from ramakv_daemon.sweeps import loop
from ramakv_daemon.telemetry.log_text import loggable
from ramakv_daemon.telemetry.metrics import DaemonMetrics

log = logging.getLogger("ramakv")

# An event's run(payload, None) (a BackgroundEvent through the bus): no event_id.
Run = Callable[[JsonObject, None], Awaitable[tuple[int, JsonObject]]]

# Sessions looked at per loop step: at 50,000 sessions a whole look is ~20 ms of Python,
# in 1,000s no step holds the loop for more than about half a millisecond.
SLICE = 1000
# Events in flight at once: they share group commits, and each one's apply is one step.
BATCH = 64


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """One namespace's idle policies (seconds; 0 = never)."""

    suspend_s: float
    close_s: float

    @property
    def on(self) -> bool:
        return self.suspend_s > 0 or self.close_s > 0


def policy_of(config: Config, ns: Namespace) -> IdlePolicy:
    """The deployment's own idle_suspend_s / idle_close_s, else the top-level keys'. A
    namespace found only in the database has none: nothing removes it by itself."""
    if not ns.delivers:
        return IdlePolicy(0.0, 0.0)
    dep = ns.deployment
    suspend = dep.idle_suspend_s if dep and dep.idle_suspend_s is not None else None
    close = dep.idle_close_s if dep and dep.idle_close_s is not None else None
    return IdlePolicy(
        config.idle_suspend_s if suspend is None else suspend,
        config.idle_close_s if close is None else close,
    )


def interval_of(policies: list[IdlePolicy]) -> float:
    """A tenth of the shortest policy, 1 s to 60 s: a session is acted on at most that
    late, and a sweep over nothing due costs one look at each session."""
    shortest = min((t for p in policies for t in (p.suspend_s, p.close_s) if t > 0), default=0)
    return min(60.0, max(1.0, shortest / 10))


@dataclass(slots=True)
class SweepResult:
    """What one sweep did."""

    looked_at: int = 0
    suspended: int = 0
    closed: int = 0
    failed: int = 0


class IdleSweep:
    """Runs the idle policies: once at start-up (the idle clock is the stored
    last_event_ts, so a restart neither resets nor skips it), then every interval; one
    sweep at a time, in slices of sessions, acting in batches of events."""

    def __init__(
        self,
        config: Config,
        namespaces: Namespaces,
        run: Run,
        metrics: DaemonMetrics,
        clock: Callable[[], float],
        slice_size: int = SLICE,
        batch: int = BATCH,
        batched: MessageBus | None = None,
    ) -> None:
        """``run``: an event alone (a BackgroundEvent through the bus: the pipeline's run
        in the background lane); ``batched``: the bus a slice's events go through in
        batches instead (ActIdle; None on a shared store, where each event takes its
        session over and is fenced on its own: the pipeline's path)."""
        self.config = config
        self.namespaces = namespaces
        self.run = run
        self.metrics = metrics
        self.clock = clock
        self.slice_size = slice_size
        self.batch = batch
        self.batched = batched
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        # (namespace, session) -> when first seen, for rows stored without a time (written
        # before last_event_ts was kept): their clock starts when this daemon saw them.
        self._first_seen: dict[tuple[str, str], float] = {}

    def policies(self) -> dict[str, IdlePolicy]:
        """namespace key -> its policy, for the namespaces that have one."""
        found = {ns.key: policy_of(self.config, ns) for ns in self.namespaces}
        return {k: p for k, p in found.items() if p.on}

    async def start(self) -> None:
        """Start the loop (its first sweep at once, in the background, so start-up does
        not wait for it) when any namespace has a policy."""
        policies = self.policies()
        if not policies:
            return
        interval = interval_of(list(policies.values()))
        self._task = asyncio.get_running_loop().create_task(
            self._forever(interval), name="idle-policy"
        )

    async def close(self) -> None:
        await loop.stop(self._task)

    async def sweep(self) -> SweepResult:
        """One pass over every namespace with a policy: close what is idle past
        idle_close_s, suspend what is idle past idle_suspend_s (a second caller waits for
        the pass under way, then makes its own)."""
        async with self._lock:
            started = time.perf_counter()
            result = SweepResult()
            for key, policy in self.policies().items():
                if key in self.namespaces:
                    await self._sweep_namespace(self.namespaces[key], policy, result)
            self.metrics.idle_sweep_seconds.observe(time.perf_counter() - started)
            if result.suspended or result.closed or result.failed:
                log.info(
                    "idle policies: %d sessions suspended, %d closed, %d failed "
                    "(%d looked at, %.2f s)",
                    result.suspended,
                    result.closed,
                    result.failed,
                    result.looked_at,
                    time.perf_counter() - started,
                )
            return result

    async def _sweep_namespace(self, ns: Namespace, policy: IdlePolicy, out: SweepResult) -> None:
        sessions = ns.manager.sessions
        ids = list(sessions)  # the sessions as they are now; later ones wait a sweep
        for start in range(0, len(ids), self.slice_size):
            if start:
                await asyncio.sleep(0)  # a slice per loop step: events run in between
            now = self.clock()
            due = self._due(ns, policy, ids[start : start + self.slice_size], now)
            out.looked_at += min(self.slice_size, len(ids) - start)
            if self.batched is not None:
                actions = await self.act(ns, [self._payload(ns, *one) for one in due])
                for action in actions:
                    if action in ("suspend", "close"):
                        self.metrics.idle_actions.labels(ns.metric_label, action).inc()
                _count(actions, out)
                continue
            for i in range(0, len(due), self.batch):
                answers = await asyncio.gather(
                    *(self._act(ns, *one) for one in due[i : i + self.batch])
                )
                _count(answers, out)
        seen = self._first_seen
        for sid in [sid for k, sid in seen if k == ns.key and sid not in sessions]:
            del seen[(ns.key, sid)]

    async def act(self, ns: Namespace, payloads: list[JsonObject]) -> list[Action]:
        """Every payload applied through the bus, in order, a batch per command; an action
        each."""
        assert self.batched is not None
        out: list[Action] = []
        while len(out) < len(payloads):
            out.extend(await self.batched.handle(ActIdle(ns.key, payloads[len(out) :])))
        return out

    def _due(
        self, ns: Namespace, policy: IdlePolicy, ids: list[str], now: float
    ) -> list[tuple[str, str, float]]:
        """(event type, session, if_idle_since) for each session of ``ids`` due now."""
        sessions = ns.manager.sessions
        close_by = now - policy.close_s if policy.close_s > 0 else -math.inf
        suspend_by = now - policy.suspend_s if policy.suspend_s > 0 else -math.inf
        # A turn in flight counts from its turn_start (which stores last_event_ts): the
        # longest turn must stay under idle_suspend_s; one that does not is suspended and
        # its turn_end, which references the map again, takes it back.
        due: list[tuple[str, str, float]] = []
        for sid in ids:
            s = sessions.get(sid)
            if s is None:
                continue
            ts = s.last_event_ts or self._first_seen.setdefault((ns.key, sid), now)
            if ts <= close_by:
                due.append(("session_close", sid, close_by))
            elif ts <= suspend_by and not s.suspended:
                due.append(("session_suspend", sid, suspend_by))
        return due

    @staticmethod
    def _payload(ns: Namespace, type_: str, sid: str, since: float) -> JsonObject:
        """The conditioned event a policy sends for one due session."""
        # The reason names the policy on the trace (notes.reason), beside notes.idle_s.
        reason = "idle_close_s" if type_ == "session_close" else "idle_suspend_s"
        return {
            "type": type_,
            "session_id": sid,
            "namespace": ns.key,
            FIELD: since,
            "reason": reason,
            # A policy guesses the session is done: its chunks are never deleted on it.
            INFERRED: True,
        }

    async def _act(self, ns: Namespace, type_: str, sid: str, since: float) -> str:
        """Send one conditioned event; "suspend", "close", "" (no longer idle) or "failed"."""
        payload = self._payload(ns, type_, sid, since)
        # On a shared store the sweep acts on this node's copy only: never taking the
        # session over from the node another event moved it to (its write is fenced).
        with Ownership.local(sid):
            status, body = await self.run(payload, None)
        if not body.get("ok"):
            # A store away (503) or a session that moved: the next sweep looks again.
            log.warning(
                "idle policy %s of session %s failed (will retry): HTTP %d %s",
                type_,
                loggable(sid),
                status,
                loggable(str(body.get("error", ""))),
            )
            return "failed"
        data = body.get("data") or {}
        action = "close" if type_ == "session_close" else "suspend"
        if not data.get("closed" if action == "close" else "suspended"):
            return ""  # an event came first: the condition held it back
        self.metrics.idle_actions.labels(ns.metric_label, action).inc()
        return action

    async def _forever(self, interval: float) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # the loop must outlive one bad pass
                log.exception("idle policy sweep failed")
            await asyncio.sleep(interval)


def _count(actions: list[str], out: SweepResult) -> None:
    for action in actions:
        if action == "suspend":
            out.suspended += 1
        elif action == "close":
            out.closed += 1
        elif action == "failed":
            out.failed += 1
