"""The I/O driver of the session lifecycle the proxy infers (no host code): feeds each
request's begin and end and each due deadline to the pure machine
(:mod:`ramakv_sdk.lifecycle.machine`) and applies the commands it returns.

* an answer that calls a tool: after ``tool_pause_suspend_s`` with no new request,
  ``session_suspend`` (``tool_pause``); the next request restores it first and waits,
  at most ``restore_wait_ms``, for its chunks in DDR; a session the daemon suspended
  (asked before a request ``IDLE_CHECK_S`` or more after the session's last answer) too;
* an agent run's final answer (an answer in words to a request that offered tools and
  carried their use): after the adaptive run-end grace, ``session_suspend`` (``run_end``,
  ``inferred``: a guess, the daemon never deletes on it); a session that comes back
  after it is a misprediction, counted; its return gap feeds the grace, and so does a
  run end whose session did not come back within the grace's horizon or was closed first
  (``run_end_no_returns``: a run end that needed no grace);
* a side call (a prompt that does not extend the session's context) goes to
  ``<sid>#branch``, closed (inferred, ``branch_end``) after its answer;
* a client that leaves mid-answer, unless a newer request of the session came (a retry),
  or no request for ``session_idle_close_s``: ``session_close`` (inferred).

Waits on the daemon's answers are bounded per request (``daemon_wait_ms``) behind a
circuit breaker; pending deadlines are kept in ``state_file`` over a restart.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ramakv_protocol.log_text import loggable
from ramakv_proxy import pending
from ramakv_proxy.breaker import Breaker, bounded
from ramakv_proxy.context import PromptShape
from ramakv_proxy.grace import AdaptiveGrace
from ramakv_proxy.request_end import RequestEnd
from ramakv_proxy.settings import ProxySettings
from ramakv_sdk.lifecycle.clock import Clock, Timer
from ramakv_sdk.lifecycle.landing import Landing, LandingWait
from ramakv_sdk.lifecycle.machine import (
    Arm,
    Command,
    Count,
    Disarm,
    Forget,
    IllegalStep,
    NoReturn,
    Policy,
    Restore,
    ReturnGap,
    Send,
    SessionMachine,
    Signal,
    State,
    TurnStart,
)
from ramakv_sdk.sender import EventSender

log = logging.getLogger("ramakv_proxy")

#: A request this long or more after its session's last answer (or of a session the proxy
#: does not remember) first asks the daemon whether the session is suspended: no idle
#: policy suspends sooner, and a quick tool's next request skips the round trip.
IDLE_CHECK_S = 1.0
#: A side call's session: the main session's id with this suffix.
BRANCH_SUFFIX = "#branch"
#: Pending deadlines are written at most this often (and when the proxy stops).
PERSIST_EVERY_S = 1.0
_DUE_SIGNAL = {
    "suspend": Signal.SUSPEND_DUE,
    "run_end": Signal.RUN_END_DUE,
    "idle": Signal.IDLE_DUE,
    "horizon": Signal.HORIZON_DUE,
}


@dataclass(slots=True)
class LifecycleStats:
    """The proxy's lifecycle decisions, counted."""

    tool_calls: int = 0  # answers that called a tool
    suspends: int = 0  # session_suspend sent after a tool pause
    suspends_cancelled: int = 0  # a request came within the grace period
    restores: int = 0  # snapshot_restore sent before a suspended session's request
    restores_daemon_suspended: int = 0  # ... of them, of a session the daemon suspended
    restore_landed: int = 0  # ... whose chunks were all in DDR when it was forwarded
    restore_timed_out: int = 0  # ... forwarded at restore_wait_ms with chunks still out
    restore_unknown: int = 0  # ... where the cache could not tell (noop backend, no map)
    restore_chunks_held: int = 0  # restored chunks some tier held
    restore_chunks_in_ddr: int = 0  # ... of them in DDR when the request went on
    restore_wait_s: float = 0.0  # time spent waiting, all restores together
    closes_disconnect: int = 0  # session_close after a client left mid-answer
    disconnects_superseded: int = 0  # ... not closed: a newer request of it came (a retry)
    closes_idle: int = 0  # session_close after session_idle_close_s without a request
    suspends_run_end: int = 0  # inferred session_suspend after an agent's final answer
    run_end_cancelled: int = 0  # ... not sent: a request for the session came within it
    run_end_mispredictions: int = 0  # a session came back after its run-end suspend
    run_end_no_returns: int = 0  # final answers not followed by a return within the horizon
    branches: int = 0  # side calls sent to <sid>#branch (their prompt did not extend)
    closes_branch: int = 0  # branch sessions closed (inferred) after their answer
    branches_promoted: int = 0  # a prompt extended the last side call: history rewritten
    daemon_timeouts: int = 0  # waits on the daemon cut at daemon_wait_ms
    daemon_waits_skipped: int = 0  # waits not made: the circuit breaker was open
    breaker_opens: int = 0  # times the breaker opened (or stayed open after a retry)

    def as_dict(self) -> dict[str, float]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request's turn is reported: its session, or the session's branch."""

    session_id: str
    branch: bool = False


@dataclass(slots=True)
class Ticket:
    """One request: its number in its session, its id on the wire, its daemon-wait end."""

    number: int
    request_id: str
    wait_until: float
    restore: str | None = None  # the machine says: restore first, for this reason
    ask: bool = False  # ask the daemon whether it suspended the session


_END_SIGNAL = {
    RequestEnd.TOOL_CALL: Signal.TOOL_CALL,
    RequestEnd.ANSWERED: Signal.ANSWERED,
    RequestEnd.FAILED: Signal.ANSWERED,
    RequestEnd.DISCONNECTED: Signal.DISCONNECTED,
}


class Lifecycle:
    """Per-session machines and their timers; ``begin``/``end`` bracket each request."""

    def __init__(
        self, settings: ProxySettings, sender: EventSender, clock: Clock, landing: LandingWait
    ) -> None:
        self.settings = settings
        self.sender = sender
        self.clock = clock
        self.landing = landing
        self.stats = LifecycleStats()
        self.grace = AdaptiveGrace(settings.run_end_grace_s)
        self.breaker = Breaker(clock)
        self._machines: dict[str, SessionMachine] = {}
        self._timers: dict[str, dict[str, Timer]] = {}
        self._restoring: dict[str, asyncio.Task[None]] = {}
        self._last_end: dict[str, float] = {}
        self._shapes: dict[str, PromptShape] = {}
        # The last side call's prompt per session: a next prompt extending it means the
        # history was rewritten and the conversation goes on from there.
        self._side_shapes: dict[str, PromptShape] = {}
        # Request ids unique across restarts: this process's random prefix, then a count.
        self._prefix = secrets.token_hex(4)
        self._ids = itertools.count(1)
        self._state_file = Path(settings.state_file) if settings.state_file else None
        self._persist_timer: Timer | None = None
        self._load()

    # ---- what the proxy shows -------------------------------------------------------------
    @property
    def sessions(self) -> int:
        """Sessions the proxy remembers (a deadline pending, suspended or in flight)."""
        return len(self._machines)

    def by_state(self) -> dict[str, int]:
        """How many remembered sessions are in each state."""
        counts: dict[str, int] = {}
        for m in self._machines.values():
            counts[m.state.value] = counts.get(m.state.value, 0) + 1
        return counts

    def state_of(self, session_id: str) -> str | None:
        """The session's machine state (``in_flight``, ``tool_pause``, ``run_end``,
        ``suspended``, ``idle``), or None when not remembered."""
        m = self._machines.get(session_id)
        return None if m is None else m.state.value

    def policy(self) -> Policy:
        s = self.settings
        return Policy(
            s.tool_pause_suspend_s,
            self.grace.seconds,
            s.session_idle_close_s,
            s.close_on_disconnect,
            self.grace.horizon,
        )

    # ---- routing ----------------------------------------------------------------------------
    def route(self, session_id: str, shape: PromptShape | None) -> Route:
        """The session, or its branch when the prompt does not extend the session's last
        one (a side call must not replace the session's map)."""
        if shape is None:
            return Route(session_id)
        before = self._shapes.get(session_id)
        if before is not None and not shape.extends(before):
            side = self._side_shapes.get(session_id)
            if side is not None and shape.extends(side) and not self._is_retry(shape, side):
                # The conversation moved on from a rewritten history (a trimmed or
                # summarised context): the last side call was its new line, not a side call.
                self.stats.branches_promoted += 1
                log.info(
                    "session %s: its prompt moved on from a rewritten history",
                    loggable(session_id),
                )
                self._side_shapes.pop(session_id, None)
                self._shapes[session_id] = shape.slim()
                return Route(session_id)
            self._side_shapes[session_id] = shape.slim()
            self.stats.branches += 1
            log.info(
                "session %s: a side call (its prompt does not extend the session's)",
                loggable(session_id),
            )
            return Route(session_id + BRANCH_SUFFIX, branch=True)
        self._side_shapes.pop(session_id, None)
        self._shapes[session_id] = shape.slim()
        return Route(session_id)

    @staticmethod
    def _is_retry(shape: PromptShape, side: PromptShape) -> bool:
        """The same side call again (a re-ask retried) is no sign the history moved on."""
        return side.extends(shape)

    # ---- a request begins -------------------------------------------------------------------
    def start(self, route: Route) -> Ticket:
        """A request begins (no wait): the machine learns it; :meth:`ready` does the rest.
        Every ticket must be ended (:meth:`end`), whatever happens in between."""
        sid = route.session_id
        m = self._machines.get(sid)
        known = m is not None
        if m is None:
            m = self._machines[sid] = SessionMachine(branch=route.branch)
        now = self.clock.now()
        last_end = self._last_end.get(sid)
        ticket = Ticket(
            m.requests + 1,
            f"{self._prefix}-{next(self._ids)}",
            now + self.settings.daemon_wait_ms / 1000,
        )
        commands = m.step(Signal.REQUEST, now, self.policy())
        self._apply(sid, commands)
        for c in commands:
            if isinstance(c, Restore):
                ticket.restore = c.reason
            elif isinstance(c, TurnStart) and c.first and not route.branch:
                ticket.ask = not known or last_end is None or now - last_end >= IDLE_CHECK_S
        return ticket

    async def ready(self, route: Route, ticket: Ticket) -> None:
        """Before the request is forwarded: restore the session if this proxy (or, asked,
        the daemon) suspended it, waiting bounded for its chunks; else send turn_start."""
        sid = route.session_id
        if ticket.restore is not None and sid not in self._restoring:
            self._restoring[sid] = asyncio.get_running_loop().create_task(
                self._restore(sid, ticket.restore, ticket)
            )
        elif ticket.ask and sid not in self._restoring:
            if await self._daemon_suspended(sid, ticket) and sid not in self._restoring:
                self.stats.restores_daemon_suspended += 1
                log.info("session %s: suspended by the daemon; restoring it first", loggable(sid))
                self._restoring[sid] = asyncio.get_running_loop().create_task(
                    self._restore(sid, "next_request", ticket)
                )
        task = self._restoring.get(sid)
        if task is not None:
            try:
                # shield: a client leaving cancels its own wait, not the restore others share
                await asyncio.shield(task)
            finally:
                if task.done() and self._restoring.get(sid) is task:
                    del self._restoring[sid]
            return
        if self.settings.turn_start_prefetch == "wait" and not route.branch:
            await self._turn_start_waited(sid, ticket)
        else:
            self.sender.submit(self._turn_start(sid, ticket, prefetch=False))

    @staticmethod
    def _turn_start(sid: str, ticket: Ticket, prefetch: bool | None) -> dict[str, Any]:
        event: dict[str, Any] = {"type": "turn_start", "session_id": sid}
        if prefetch is not None:
            event["prefetch"] = prefetch
        event["request_id"] = ticket.request_id
        return event

    async def wait_daemon(self, ticket: Ticket, aw: Any) -> tuple[bool, Any]:
        """Wait for a daemon answer within the request's budget; a timeout opens the
        breaker, and while it is open nothing waits (``aw`` is dropped, a queued event
        still goes)."""
        remaining = ticket.wait_until - self.clock.now()
        if not self.breaker.allow() or remaining <= 0:
            if not self.breaker.allow():
                self.stats.daemon_waits_skipped += 1
            if asyncio.iscoroutine(aw):
                aw.close()
            return False, None
        ok, result = await bounded(self.clock, remaining, aw)
        if ok:
            self.breaker.success()
            return True, result
        self._timed_out()
        return False, None

    def _timed_out(self) -> None:
        self.stats.daemon_timeouts += 1
        self.breaker.failure()
        self.stats.breaker_opens = self.breaker.opens

    async def _daemon_suspended(self, sid: str, ticket: Ticket) -> bool:
        ok, suspended = await self.wait_daemon(ticket, self.landing.suspended(sid))
        return bool(ok and suspended)

    async def _turn_start_waited(self, sid: str, ticket: Ticket) -> None:
        deadline = self.clock.now() + self.settings.restore_wait_ms / 1000
        answer = self.sender.submit_wait(self._turn_start(sid, ticket, None))
        ok, env = await self.wait_daemon(ticket, asyncio.shield(answer))
        data = (env or {}).get("data") or {}
        if ok and env and env.get("ok") and data.get("prefetch_count") and deadline > 0:
            if self.settings.restore_wait_ms:
                await self._landed(sid, deadline)

    async def _restore(self, sid: str, reason: str, ticket: Ticket) -> None:
        try:
            await self._restore_now(sid, reason, ticket)
        except Exception:  # a bug here must not fail the client's request
            log.exception("restoring session %s failed", loggable(sid))

    async def _restore_now(self, sid: str, reason: str, ticket: Ticket) -> None:
        started = self.clock.now()
        deadline = started + self.settings.restore_wait_ms / 1000
        self.stats.restores += 1
        event = {
            "type": "snapshot_restore",
            "session_id": sid,
            "reason": reason,
            "request_id": ticket.request_id,
        }
        answer = self.sender.submit_wait(event)
        # The turn itself: pins the session against demotion while it runs; the restore
        # prefetches, so this one asks for none. Queued behind the restore, in order.
        self.sender.submit(self._turn_start(sid, ticket, prefetch=False))
        ok, env = await self.wait_daemon(ticket, asyncio.shield(answer))
        data = (env or {}).get("data") or {}
        landing = Landing("unknown")
        if ok and env and env.get("ok") and data.get("prefetch_count"):
            if self.settings.restore_wait_ms:
                landing = await self._landed(sid, deadline)
        self._count_restore(landing)
        log.info(
            "session %s restored before its next request: %s (%d/%d chunks in DDR, waited %.1f ms)",
            loggable(sid),
            landing.outcome,
            landing.in_ddr,
            landing.held,
            landing.waited_s * 1000,
        )

    async def _landed(self, sid: str, deadline: float) -> Landing:
        """The bounded wait for DDR, cut at its deadline plus one daemon wait even when
        a poll hangs (a daemon that stops answering mid-wait opens the breaker)."""
        started = self.clock.now()
        bound = max(0.0, deadline - started) + self.settings.daemon_wait_ms / 1000
        ok, landing = await bounded(self.clock, bound, self.landing.wait(sid, deadline))
        if ok and landing is not None:
            return landing
        self._timed_out()
        return Landing("timeout", waited_s=self.clock.now() - started)

    def _count_restore(self, landing: Landing) -> None:
        st = self.stats
        if landing.outcome == "landed":
            st.restore_landed += 1
        elif landing.outcome == "timeout":
            st.restore_timed_out += 1
        else:
            st.restore_unknown += 1
        st.restore_chunks_held += landing.held
        st.restore_chunks_in_ddr += landing.in_ddr
        st.restore_wait_s += landing.waited_s

    # ---- a request ends -------------------------------------------------------------------
    def end(self, route: Route, ticket: Ticket, ended: RequestEnd, agent_step: bool) -> None:
        """After a request: feed how it ended to the machine. ``agent_step``: the request
        offered tools and carried their use, so an answer in words ends the agent's run."""
        sid = route.session_id
        m = self._machines.get(sid)
        if m is None or m.state is not State.IN_FLIGHT:
            return
        signal = _END_SIGNAL[ended]
        if ended is RequestEnd.ANSWERED and agent_step:
            signal = Signal.FINAL
        now = self.clock.now()
        self._last_end[sid] = now
        self._apply(sid, m.step(signal, now, self.policy(), ticket.number))

    def _due_later(self, sid: str, kind: str) -> Callable[[], None]:
        return lambda: self._due(sid, kind)

    def _due(self, sid: str, kind: str) -> None:
        self._timers.get(sid, {}).pop(kind, None)
        m = self._machines.get(sid)
        if m is None or kind not in m.deadlines:
            return
        try:
            commands = m.step(_DUE_SIGNAL[kind], self.clock.now(), self.policy())
        except IllegalStep as err:  # a deadline the machine no longer expects
            log.warning("session %s: %s", loggable(sid), err)
            return
        self._apply(sid, commands)

    # ---- applying commands ----------------------------------------------------------------
    def _apply(self, sid: str, commands: list[Command]) -> None:
        for c in commands:
            if isinstance(c, Send):
                self._send(sid, c)
            elif isinstance(c, Arm):
                timers = self._timers.setdefault(sid, {})
                old = timers.pop(c.kind, None)
                if old is not None:
                    old.cancel()
                delay = max(0.0, c.at - self.clock.now())
                timers[c.kind] = self.clock.call_later(delay, self._due_later(sid, c.kind))
            elif isinstance(c, Disarm):
                timer = self._timers.get(sid, {}).pop(c.kind, None)
                if timer is not None:
                    timer.cancel()
            elif isinstance(c, Count):
                setattr(self.stats, c.stat, getattr(self.stats, c.stat) + 1)
                if c.stat == "run_end_mispredictions":
                    log.info(
                        "session %s came back after its run-end suspend (a misprediction)",
                        loggable(sid),
                    )
            elif isinstance(c, ReturnGap):
                self.grace.observe(c.seconds)
            elif isinstance(c, NoReturn):
                self.stats.run_end_no_returns += 1
                self.grace.observe_no_return()
            elif isinstance(c, Forget):
                self._forget(sid)
        self._mark_dirty()

    def _send(self, sid: str, c: Send) -> None:
        name = loggable(sid)
        if c.reason == "tool_pause":
            log.info(
                "session %s: suspended after a %.3g s tool pause",
                name,
                self.settings.tool_pause_suspend_s,
            )
        elif c.reason == "run_end":
            log.info(
                "session %s: suspended (inferred) %.3g s after its final answer "
                "(the agent's run seems over)",
                name,
                self.grace.seconds,
            )
        elif c.reason == "idle":
            log.info(
                "session %s: closed after %.3g s without a request",
                name,
                self.settings.session_idle_close_s,
            )
        elif c.reason == "branch_end":
            log.info("session %s: side call answered; its branch closed", name)
        else:
            log.info("session %s: closed, its client left mid-answer", name)
        event: dict[str, Any] = {"type": c.type, "session_id": sid, "reason": c.reason}
        if c.inferred:
            event["inferred"] = True
        self.sender.submit(event)

    def _forget(self, sid: str) -> None:
        self._machines.pop(sid, None)
        for timer in self._timers.pop(sid, {}).values():
            timer.cancel()
        self._last_end.pop(sid, None)
        self._shapes.pop(sid, None)
        self._side_shapes.pop(sid, None)

    # ---- pending state over a restart -------------------------------------------------------
    def _load(self) -> None:
        if self._state_file is None:
            return
        doc = pending.read(self._state_file)
        machines = pending.load(doc, self.clock.now(), self.clock.wall())
        for sid, m in machines.items():
            self._machines[sid] = m
            self._apply(sid, [Arm(kind, at) for kind, at in m.deadlines.items()])
        if machines:
            log.info(
                "%d sessions' pending suspends and closes restored from %s",
                len(machines),
                self._state_file,
            )

    def _mark_dirty(self) -> None:
        if self._state_file is None or self._persist_timer is not None:
            return
        self._persist_timer = self.clock.call_later(PERSIST_EVERY_S, self.persist)

    def persist(self) -> None:
        """Write the pending deadlines now (atomically); a failure is logged."""
        self._persist_timer = None
        if self._state_file is None:
            return
        doc = pending.dump(
            self._machines, self.clock.now(), self.clock.wall(), self.settings.session_idle_close_s
        )
        try:
            pending.write(self._state_file, doc)
        except OSError as err:
            log.warning("pending state not written to %s: %s", self._state_file, err)

    def close(self) -> None:
        """Stop every timer (the proxy is stopping) after writing what is pending."""
        if self._persist_timer is not None:
            self._persist_timer.cancel()
        self.persist()
        for timers in self._timers.values():
            for timer in timers.values():
                timer.cancel()
        self._timers.clear()
        for task in self._restoring.values():
            task.cancel()
