"""The session lifecycle the proxy infers from requests and answers (no host code).

* an answer that calls a tool means the agent now runs it: after ``tool_pause_suspend_s``
  with no new request for the session, ``session_suspend`` (its chunks leave DDR);
* the next request of a suspended session restores it first (``snapshot_restore``, then
  ``turn_start``) and waits, at most ``restore_wait_ms``, for its chunks to be in DDR; a
  session the daemon suspended (its idle policy), found so by asking before a request
  that comes ``IDLE_CHECK_S`` or more after the session's last answer, is restored alike;
* an answer that calls no tool, to a request that offered tools and carried their use (a
  tool result), is the agent run's final answer: after ``run_end_close_s`` with no new
  request for the session, ``session_close`` (its chunks are deleted, so a finished run's
  context does not push out the paused live ones);
* a session whose client leaves mid-answer, or with no request for
  ``session_idle_close_s``, is closed.

Every decision is logged, counted (``/_ramakv/stats``, ``/_ramakv/metrics``) and sent with
a ``reason`` field, so it shows on the daemon's trace as the event it sent. Timers come
from an injectable :class:`~ramakv_sdk.proxy.clock.Clock`, so tests drive them.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import asdict, dataclass

from ramakv_sdk.proxy.clock import Clock, Timer
from ramakv_sdk.proxy.landing import Landing, LandingWait
from ramakv_sdk.proxy.settings import ProxySettings
from ramakv_sdk.sender import EventSender

log = logging.getLogger("ramakv_proxy")

#: A request this long or more after its session's last answer (or of a session the proxy
#: does not remember) first asks the daemon whether the session is suspended: no idle
#: policy suspends sooner, and a quick tool's next request skips the round trip.
IDLE_CHECK_S = 1.0


class Outcome(enum.Enum):
    """How one request of a session ended, as the proxy saw it."""

    ANSWERED = "answered"  # a complete 200 answer that calls no tool
    TOOL_CALL = "tool_call"  # a complete 200 answer that calls a tool
    DISCONNECTED = "disconnected"  # the client left before the answer's end
    FAILED = "failed"  # the engine answered an error, or could not be reached


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
    closes_idle: int = 0  # session_close after session_idle_close_s without a request
    closes_run_end: int = 0  # session_close run_end_close_s after an agent's final answer
    run_end_cancelled: int = 0  # ... not sent: a request for the session came within it

    def as_dict(self) -> dict[str, float]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass(slots=True)
class _Session:
    in_flight: int = 0
    suspended: bool = False  # the proxy suspended it; its next request restores it
    restoring: asyncio.Task[None] | None = None
    close_pending: bool = False  # a client left; close once nothing is in flight
    suspend_timer: Timer | None = None
    idle_timer: Timer | None = None
    run_end_timer: Timer | None = None
    last_end: float | None = None  # when its last request ended (the proxy's clock)


class Lifecycle:
    """Per-session state and timers of one proxy; ``begin``/``end`` bracket each request."""

    def __init__(
        self, settings: ProxySettings, sender: EventSender, clock: Clock, landing: LandingWait
    ) -> None:
        self.settings = settings
        self.sender = sender
        self.clock = clock
        self.landing = landing
        self.stats = LifecycleStats()
        self._sessions: dict[str, _Session] = {}

    @property
    def sessions(self) -> int:
        """Sessions the proxy remembers (a timer pending, suspended or in flight)."""
        return len(self._sessions)

    def state_of(self, session_id: str) -> str | None:
        """``in_flight``, ``tool_pause``, ``suspended``, ``run_end`` (a final answer's
        grace), ``idle`` or None (not remembered)."""
        s = self._sessions.get(session_id)
        if s is None:
            return None
        if s.in_flight:
            return "in_flight"
        if s.suspended:
            return "suspended"
        if s.suspend_timer is not None:
            return "tool_pause"
        return "run_end" if s.run_end_timer is not None else "idle"

    # ---- a request begins --------------------------------------------------------------
    async def begin(self, session_id: str) -> None:
        """Before a request of ``session_id`` is forwarded: restore it if the proxy
        suspended it, or the daemon did (asked when the session may have been idle long
        enough, see :data:`IDLE_CHECK_S`), waiting, bounded, for its chunks; else send
        turn_start."""
        s = self._sessions.get(session_id)
        known = s is not None
        if s is None:
            s = self._sessions[session_id] = _Session()
        if s.suspend_timer is not None:
            self.stats.suspends_cancelled += 1
            log.info(
                "session %s: new request within the tool pause grace; not suspended", session_id
            )
        if s.run_end_timer is not None:
            self.stats.run_end_cancelled += 1
            log.info(
                "session %s: new request within the grace after its final answer; not closed",
                session_id,
            )
        self._cancel_timers(s)
        s.in_flight += 1
        if s.suspended and s.restoring is None:
            s.suspended = False
            s.restoring = asyncio.get_running_loop().create_task(self._restore(session_id))
        elif s.restoring is None and s.in_flight == 1 and self._may_be_idle(s, known):
            if await self.landing.suspended(session_id) and s.restoring is None:
                self.stats.restores_daemon_suspended += 1
                log.info("session %s: suspended by the daemon; restoring it first", session_id)
                s.restoring = asyncio.get_running_loop().create_task(self._restore(session_id))
        if s.restoring is not None:
            try:
                # shield: a client leaving cancels its own wait, not the restore others share
                await asyncio.shield(s.restoring)
            finally:
                if s.restoring is not None and s.restoring.done():
                    s.restoring = None
            return
        if self.settings.turn_start_prefetch == "wait":
            await self._turn_start_waited(session_id)
        else:
            self.sender.submit({"type": "turn_start", "session_id": session_id, "prefetch": False})

    def _may_be_idle(self, s: _Session, known: bool) -> bool:
        """Whether the daemon may have suspended the session since the proxy last saw it."""
        if not known or s.last_end is None:
            return True
        return self.clock.now() - s.last_end >= IDLE_CHECK_S

    async def _turn_start_waited(self, session_id: str) -> None:
        deadline = self.clock.now() + self.settings.restore_wait_ms / 1000
        env = await self.sender.submit_wait({"type": "turn_start", "session_id": session_id})
        data = (env or {}).get("data") or {}
        if env and env.get("ok") and data.get("prefetch_count") and self.settings.restore_wait_ms:
            await self.landing.wait(session_id, deadline)

    async def _restore(self, session_id: str) -> None:
        try:
            await self._restore_now(session_id)
        except Exception:  # a bug here must not fail the client's request
            log.exception("restoring session %s failed", session_id)

    async def _restore_now(self, session_id: str) -> None:
        started = self.clock.now()
        deadline = started + self.settings.restore_wait_ms / 1000
        self.stats.restores += 1
        env = await self.sender.submit_wait(
            {"type": "snapshot_restore", "session_id": session_id, "reason": "next_request"}
        )
        # The turn itself: pins the session against demotion while it runs; the restore
        # already prefetched, so this one asks for none.
        self.sender.submit({"type": "turn_start", "session_id": session_id, "prefetch": False})
        data = (env or {}).get("data") or {}
        landing = Landing("unknown")
        if env and env.get("ok") and data.get("prefetch_count") and self.settings.restore_wait_ms:
            landing = await self.landing.wait(session_id, deadline)
        self._count_restore(landing)
        log.info(
            "session %s restored before its next request: %s (%d/%d chunks in DDR, waited %.1f ms)",
            session_id,
            landing.outcome,
            landing.in_ddr,
            landing.held,
            landing.waited_s * 1000,
        )

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

    # ---- a request ends ----------------------------------------------------------------
    def end(self, session_id: str, outcome: Outcome, agent_step: bool = False) -> None:
        """After a request of ``session_id``: schedule what its outcome implies.

        ``agent_step``: the request offered tools and carried their use, so an answer that
        calls none ends the agent's run (see :class:`~ramakv_sdk.proxy.naming.Named`)."""
        s = self._sessions.get(session_id)
        if s is None:
            return
        s.in_flight = max(0, s.in_flight - 1)
        s.last_end = self.clock.now()
        if outcome is Outcome.TOOL_CALL:
            self.stats.tool_calls += 1
        if outcome is Outcome.DISCONNECTED and self.settings.close_on_disconnect:
            s.close_pending = True
        if s.in_flight:
            return
        if s.close_pending:
            self._close(session_id, s, "client_disconnected")
            return
        grace = self.settings.tool_pause_suspend_s
        if outcome is Outcome.TOOL_CALL and grace > 0:
            s.suspend_timer = self.clock.call_later(grace, lambda: self._suspend_due(session_id, s))
        run_end = self.settings.run_end_close_s
        if outcome is Outcome.ANSWERED and agent_step and run_end > 0:
            s.run_end_timer = self.clock.call_later(
                run_end, lambda: self._run_end_due(session_id, s)
            )
        idle = self.settings.session_idle_close_s
        if idle > 0:
            s.idle_timer = self.clock.call_later(idle, lambda: self._idle_due(session_id, s))
        timers = (s.suspend_timer, s.idle_timer, s.run_end_timer)
        if all(t is None for t in timers) and not s.suspended:
            del self._sessions[session_id]  # nothing to remember

    def _suspend_due(self, session_id: str, s: _Session) -> None:
        s.suspend_timer = None
        if self._sessions.get(session_id) is not s or s.in_flight or s.suspended:
            return
        s.suspended = True
        self.stats.suspends += 1
        log.info(
            "session %s: suspended after a %.3g s tool pause",
            session_id,
            self.settings.tool_pause_suspend_s,
        )
        self.sender.submit(
            {"type": "session_suspend", "session_id": session_id, "reason": "tool_pause"}
        )

    def _idle_due(self, session_id: str, s: _Session) -> None:
        s.idle_timer = None
        if self._sessions.get(session_id) is not s or s.in_flight:
            return
        self._close(session_id, s, "idle")

    def _run_end_due(self, session_id: str, s: _Session) -> None:
        s.run_end_timer = None
        if self._sessions.get(session_id) is not s or s.in_flight:
            return
        self._close(session_id, s, "run_end")

    def _close(self, session_id: str, s: _Session, reason: str) -> None:
        self._cancel_timers(s)
        del self._sessions[session_id]
        if reason == "run_end":
            self.stats.closes_run_end += 1
            log.info(
                "session %s: closed %.3g s after its final answer (the agent's run ended)",
                session_id,
                self.settings.run_end_close_s,
            )
        elif reason == "idle":
            self.stats.closes_idle += 1
            log.info(
                "session %s: closed after %.3g s without a request",
                session_id,
                self.settings.session_idle_close_s,
            )
        else:
            self.stats.closes_disconnect += 1
            log.info("session %s: closed, its client left mid-answer", session_id)
        self.sender.submit({"type": "session_close", "session_id": session_id, "reason": reason})

    @staticmethod
    def _cancel_timers(s: _Session) -> None:
        for timer in (s.suspend_timer, s.idle_timer, s.run_end_timer):
            if timer is not None:
                timer.cancel()
        s.suspend_timer = s.idle_timer = s.run_end_timer = None

    def close(self) -> None:
        """Cancel every timer (the proxy is stopping; sessions stay as the daemon has them)."""
        for s in self._sessions.values():
            self._cancel_timers(s)
            if s.restoring is not None:
                s.restoring.cancel()
