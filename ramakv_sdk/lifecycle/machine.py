"""The session lifecycle as a pure state machine (no I/O, no clock): a (state, signal) table
gives the next state; :meth:`SessionMachine.step` returns the commands the driver applies
(events to send, deadlines to arm or drop, counters). Modelled on h11's ``_state.py``: an
illegal step raises :class:`IllegalStep` and leaves the machine as it was.

The proxy (:mod:`ramakv_proxy.lifecycle`) and the framework hooks
(:mod:`ramakv_sdk.hooks.signals`) drive the same machine. It lives in the SDK, not in the
proxy, so that both import it downwards: the hooks are the client library and must not
depend on the server (ramakv_proxy stands above ramakv_sdk); and not in ramakv_protocol,
which holds the wire contract with the daemon, where this is a host's own inference.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace


class State(enum.Enum):
    """Where a session is, as its host (the proxy or a hook) sees it."""

    IDLE = "idle"  # nothing in flight, nothing pending but the idle close
    IN_FLIGHT = "in_flight"  # one or more requests forwarded, not yet ended
    TOOL_PAUSE = "tool_pause"  # an answer called a tool: suspend when the grace ends
    RUN_END = "run_end"  # a final answer: an inferred suspend when the grace ends
    SUSPENDED = "suspended"  # this host suspended it: its next request restores it
    CLOSED = "closed"  # closed: the machine is done


class Signal(enum.Enum):
    """What happened to a session."""

    REQUEST = "request"  # a request begins
    TOOL_CALL = "tool_call"  # a request ended: an answer that calls a tool
    FINAL = "final"  # ended: an answer in words to an agent step (the run's end)
    ANSWERED = "answered"  # ended: any other answer, or a failure
    DISCONNECTED = "disconnected"  # ended: the client left before the answer's end
    SUSPEND_DUE = "suspend_due"  # the tool pause grace ended
    RUN_END_DUE = "run_end_due"  # the run end grace ended
    IDLE_DUE = "idle_due"  # no request for the idle close time
    HORIZON_DUE = "horizon_due"  # a final answer's session did not come back in time
    HOST_SUSPEND = "host_suspend"  # a framework hook: a slow tool starts
    HOST_RESTORE = "host_restore"  # a framework hook: the tool is done
    HOST_CLOSE = "host_close"  # a framework hook: the run ended, close declared


ENDS = frozenset({Signal.TOOL_CALL, Signal.FINAL, Signal.ANSWERED, Signal.DISCONNECTED})
DUE = {
    Signal.SUSPEND_DUE: "suspend",
    Signal.RUN_END_DUE: "run_end",
    Signal.IDLE_DUE: "idle",
    Signal.HORIZON_DUE: "horizon",
}
_OPEN = (State.IDLE, State.TOOL_PAUSE, State.RUN_END, State.SUSPENDED)

#: The legal steps. A request ending goes back to IN_FLIGHT while others are still in
#: flight, else to the state its outcome names (resolved in :meth:`SessionMachine._end`).
TABLE: dict[tuple[State, Signal], State] = {
    **{(s, Signal.REQUEST): State.IN_FLIGHT for s in (*_OPEN, State.IN_FLIGHT)},
    **{(State.IN_FLIGHT, sig): State.IDLE for sig in ENDS},
    (State.TOOL_PAUSE, Signal.SUSPEND_DUE): State.SUSPENDED,
    (State.RUN_END, Signal.RUN_END_DUE): State.SUSPENDED,
    **{(s, Signal.IDLE_DUE): State.CLOSED for s in _OPEN},
    # Only bookkeeping for the adaptive grace: the session stays where it is.
    **{(s, Signal.HORIZON_DUE): s for s in _OPEN},
    **{(s, Signal.HOST_SUSPEND): State.SUSPENDED for s in _OPEN if s is not State.SUSPENDED},
    (State.SUSPENDED, Signal.HOST_RESTORE): State.IDLE,
    **{(s, Signal.HOST_CLOSE): State.CLOSED for s in (*_OPEN, State.IN_FLIGHT)},
}


class IllegalStep(RuntimeError):
    """A signal the session's state does not allow; the machine is unchanged."""


@dataclass(frozen=True, slots=True)
class Policy:
    """The graces in seconds (0 = never), whether a client leaving closes, and the
    horizon: how long after a final answer a return still counts as one (0 = forever)."""

    tool_pause_s: float = 2.0
    run_end_s: float = 5.0
    idle_s: float = 900.0
    close_on_disconnect: bool = True
    horizon_s: float = 0.0


# ---- commands ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Send:
    """Send a lifecycle event (session_suspend or session_close) with its reason."""

    type: str
    reason: str
    inferred: bool = False


@dataclass(frozen=True, slots=True)
class Restore:
    """Restore the session (snapshot_restore, turn_start, the bounded wait for DDR)."""

    reason: str


@dataclass(frozen=True, slots=True)
class TurnStart:
    """A plain turn_start (the driver may still find the daemon suspended it)."""

    first: bool  # no other request of the session in flight


@dataclass(frozen=True, slots=True)
class Arm:
    """Feed the machine ``DUE``'s signal for ``kind`` at time ``at`` unless disarmed."""

    kind: str
    at: float


@dataclass(frozen=True, slots=True)
class Disarm:
    kind: str


@dataclass(frozen=True, slots=True)
class Count:
    """Add one to a lifecycle stat."""

    stat: str


@dataclass(frozen=True, slots=True)
class ReturnGap:
    """A session came back ``seconds`` after its final answer (for the adaptive grace)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class NoReturn:
    """A final answer's session did not come back within the horizon, or was closed
    first: a run end that needed no grace (for the adaptive grace)."""


@dataclass(frozen=True, slots=True)
class Forget:
    """Nothing left to remember of the session."""


Command = Send | Restore | TurnStart | Arm | Disarm | Count | ReturnGap | NoReturn | Forget


@dataclass(slots=True)
class SessionMachine:
    """One session's lifecycle. ``branch``: a side call's session (``<sid>#branch``),
    closed (inferred, ``branch_end``) once its last request ends."""

    branch: bool = False
    state: State = State.IDLE
    in_flight: int = 0
    requests: int = 0  # requests begun so far; a request's number is its count at begin
    close_pending: bool = False  # a client left, nothing newer came: close at the last end
    suspended_by: str | None = None  # the reason of this host's suspend
    final_at: float | None = None  # when the run's final answer ended
    deadlines: dict[str, float] = field(default_factory=dict)

    def step(
        self, signal: Signal, now: float, policy: Policy, request: int | None = None
    ) -> list[Command]:
        """Apply ``signal`` at ``now``; the commands it implies. ``request``: the ending
        request's number (a disconnect is superseded when a newer one began)."""
        target = TABLE.get((self.state, signal))
        if target is None:
            raise IllegalStep(f"{signal.value} not allowed in state {self.state.value}")
        if signal in DUE and DUE[signal] not in self.deadlines:
            raise IllegalStep(f"{signal.value}: no {DUE[signal]} deadline armed")
        draft = replace(self, deadlines=dict(self.deadlines))
        commands = draft._apply(signal, target, now, policy, request)
        for name in self.__slots__:
            setattr(self, name, getattr(draft, name))
        return commands

    # ---- the transitions ------------------------------------------------------------------
    def _apply(
        self, signal: Signal, target: State, now: float, policy: Policy, request: int | None
    ) -> list[Command]:
        if signal is Signal.REQUEST:
            return self._request(now)
        if signal in ENDS:
            return self._end(signal, now, policy, request)
        cmds: list[Command] = []
        if signal in DUE:
            del self.deadlines[DUE[signal]]
        if signal is Signal.SUSPEND_DUE:
            cmds += [Count("suspends"), Send("session_suspend", "tool_pause")]
            self.suspended_by = "tool_pause"
        elif signal is Signal.RUN_END_DUE:
            cmds += [Count("suspends_run_end"), Send("session_suspend", "run_end", True)]
            self.suspended_by = "run_end"
        elif signal is Signal.IDLE_DUE:
            cmds += [*self._no_return(), *self._disarm_all(), Count("closes_idle")]
            cmds += [Send("session_close", "idle", True), Forget()]
        elif signal is Signal.HORIZON_DUE:
            cmds += self._no_return()
            if self.state is State.IDLE and not self.deadlines:
                cmds.append(Forget())
        elif signal is Signal.HOST_SUSPEND:
            cmds += [*self._disarm("suspend", "run_end"), Send("session_suspend", "slow_tool")]
            self.suspended_by = "slow_tool"
        elif signal is Signal.HOST_RESTORE:
            cmds.append(Restore("tool_done"))
            self.suspended_by = None
        elif signal is Signal.HOST_CLOSE:
            cmds += [*self._no_return(), *self._disarm_all()]
            cmds += [Send("session_close", "run_end"), Forget()]
        self.state = target
        return cmds

    def _request(self, now: float) -> list[Command]:
        cmds: list[Command] = [*self._disarm("suspend", "run_end", "horizon", "idle")]
        came_back = self.final_at is not None and self.state in (State.RUN_END, State.SUSPENDED)
        if self.state is State.TOOL_PAUSE:
            cmds.append(Count("suspends_cancelled"))
        elif self.state is State.RUN_END:
            cmds.append(Count("run_end_cancelled"))
        if came_back and self.final_at is not None:
            cmds.append(ReturnGap(max(0.0, now - self.final_at)))
        self.final_at = None
        if self.state is State.SUSPENDED:
            if self.suspended_by == "run_end":
                cmds.append(Count("run_end_mispredictions"))
            self.suspended_by = None
            cmds.append(Restore("next_request"))
        else:
            cmds.append(TurnStart(first=self.in_flight == 0))
        self.in_flight += 1
        self.requests += 1
        self.state = State.IN_FLIGHT
        return cmds

    def _end(
        self, signal: Signal, now: float, policy: Policy, request: int | None
    ) -> list[Command]:
        cmds: list[Command] = []
        self.in_flight -= 1
        if signal is Signal.TOOL_CALL:
            cmds.append(Count("tool_calls"))
        if signal is Signal.DISCONNECTED:
            if request is not None and request < self.requests:
                # A newer request of the session came (a retry after a client timeout):
                # the client moved on, it did not leave.
                cmds.append(Count("disconnects_superseded"))
            elif policy.close_on_disconnect:
                self.close_pending = True
        if self.in_flight:
            return cmds
        if self.close_pending or self.branch:
            reason = "client_disconnected" if self.close_pending else "branch_end"
            cmds += [*self._disarm_all(), Send("session_close", reason, True), Forget()]
            cmds.append(Count("closes_disconnect" if self.close_pending else "closes_branch"))
            self.state = State.CLOSED
            return cmds
        self.state = State.IDLE
        if signal is Signal.TOOL_CALL and policy.tool_pause_s > 0:
            self.state = State.TOOL_PAUSE
            cmds.append(self._arm("suspend", now + policy.tool_pause_s))
        elif signal is Signal.FINAL and policy.run_end_s > 0:
            self.state = State.RUN_END
            self.final_at = now
            cmds.append(self._arm("run_end", now + policy.run_end_s))
            if policy.horizon_s > 0:
                # Never before the grace in force ends: a return it caught is a return.
                horizon = max(policy.horizon_s, policy.run_end_s)
                cmds.append(self._arm("horizon", now + horizon))
        if policy.idle_s > 0:
            cmds.append(self._arm("idle", now + policy.idle_s))
        if not self.deadlines:
            cmds.append(Forget())
        return cmds

    def _no_return(self) -> list[Command]:
        """The run end's outcome, once: its session did not come back (a later request is
        no return gap then, so nothing is counted twice)."""
        if self.final_at is None:
            return []
        self.final_at = None
        return [*self._disarm("horizon"), NoReturn()]

    # ---- deadlines ------------------------------------------------------------------------
    def _arm(self, kind: str, at: float) -> Arm:
        self.deadlines[kind] = at
        return Arm(kind, at)

    def _disarm(self, *kinds: str) -> list[Command]:
        return [Disarm(k) for k in kinds if self.deadlines.pop(k, None) is not None]

    def _disarm_all(self) -> list[Command]:
        return self._disarm(*list(self.deadlines))
