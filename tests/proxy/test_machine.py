"""The lifecycle machine alone (pure: no I/O, no clock): its table, the commands each step
returns, deadlines as commands, and illegal steps that raise and change nothing."""

from __future__ import annotations

import pytest

from ramakv_proxy.context import PromptShape
from ramakv_proxy.grace import AdaptiveGrace
from ramakv_sdk.lifecycle.machine import (
    TABLE,
    Arm,
    Count,
    Disarm,
    Forget,
    IllegalStep,
    Policy,
    Restore,
    ReturnGap,
    Send,
    SessionMachine,
    Signal,
    State,
    TurnStart,
)

P = Policy(tool_pause_s=2.0, run_end_s=5.0, idle_s=900.0)


def test_a_tool_call_arms_the_suspend_and_the_idle_close() -> None:
    m = SessionMachine()
    assert m.step(Signal.REQUEST, 10.0, P) == [TurnStart(first=True)]
    cmds = m.step(Signal.TOOL_CALL, 11.0, P, request=1)
    assert cmds == [Count("tool_calls"), Arm("suspend", 13.0), Arm("idle", 911.0)]
    assert m.state is State.TOOL_PAUSE
    cmds = m.step(Signal.SUSPEND_DUE, 13.0, P)
    assert cmds == [Count("suspends"), Send("session_suspend", "tool_pause")]
    assert m.state is State.SUSPENDED and m.deadlines == {"idle": 911.0}
    cmds = m.step(Signal.REQUEST, 20.0, P)
    assert cmds == [Disarm("idle"), Restore("next_request")]


def test_a_final_answer_suspends_inferred_and_a_return_is_a_misprediction() -> None:
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, P)
    assert m.step(Signal.FINAL, 1.0, P, request=1) == [Arm("run_end", 6.0), Arm("idle", 901.0)]
    cmds = m.step(Signal.RUN_END_DUE, 6.0, P)
    assert cmds == [Count("suspends_run_end"), Send("session_suspend", "run_end", inferred=True)]
    cmds = m.step(Signal.REQUEST, 13.0, P)
    assert cmds == [
        Disarm("idle"),
        ReturnGap(12.0),
        Count("run_end_mispredictions"),
        Restore("next_request"),
    ]


def test_a_request_inside_the_run_end_grace_cancels_it_and_reports_its_gap() -> None:
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, P)
    m.step(Signal.FINAL, 1.0, P, request=1)
    cmds = m.step(Signal.REQUEST, 3.5, P)
    assert cmds == [
        Disarm("run_end"),
        Disarm("idle"),
        Count("run_end_cancelled"),
        ReturnGap(2.5),
        TurnStart(first=True),
    ]


def test_no_proxy_close_is_declared() -> None:
    """Every close the proxy sends is a guess: inferred, so the daemon never deletes on it."""
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, P)
    m.step(Signal.ANSWERED, 1.0, P, request=1)
    assert Send("session_close", "idle", inferred=True) in m.step(Signal.IDLE_DUE, 901.0, P)
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, P)
    cmds = m.step(Signal.DISCONNECTED, 1.0, P, request=1)
    assert Send("session_close", "client_disconnected", inferred=True) in cmds
    assert m.state is State.CLOSED and Forget() in cmds


def test_a_disconnect_superseded_by_a_newer_request_keeps_the_session() -> None:
    """A client times out and retries: the retry began before the first noticed its end."""
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, P)  # request 1
    m.step(Signal.REQUEST, 1.0, P)  # request 2, the retry
    assert m.step(Signal.ANSWERED, 2.0, P, request=2) == []
    cmds = m.step(Signal.DISCONNECTED, 3.0, P, request=1)
    assert cmds == [Count("disconnects_superseded"), Arm("idle", 903.0)]
    assert m.state is State.IDLE


def test_a_branch_closes_inferred_after_its_last_answer() -> None:
    m = SessionMachine(branch=True)
    m.step(Signal.REQUEST, 0.0, P)
    m.step(Signal.REQUEST, 0.0, P)
    assert m.step(Signal.ANSWERED, 1.0, P, request=1) == []
    cmds = m.step(Signal.ANSWERED, 1.0, P, request=2)
    assert Send("session_close", "branch_end", inferred=True) in cmds
    assert Count("closes_branch") in cmds and m.state is State.CLOSED


@pytest.mark.parametrize(
    ("setup", "signal"),
    [
        ([], Signal.TOOL_CALL),  # an end with nothing in flight
        ([], Signal.SUSPEND_DUE),  # a deadline never armed
        ([], Signal.HOST_RESTORE),  # a restore of a session not suspended
        ([Signal.REQUEST], Signal.IDLE_DUE),  # the idle close while a request runs
        ([Signal.REQUEST, Signal.DISCONNECTED], Signal.REQUEST),  # closed is final
    ],
)
def test_an_illegal_step_raises_and_changes_nothing(setup: list[Signal], signal: Signal) -> None:
    m = SessionMachine()
    for s in setup:
        m.step(s, 0.0, P, request=m.requests)
    before = (m.state, m.in_flight, m.requests, dict(m.deadlines), m.close_pending)
    with pytest.raises(IllegalStep):
        m.step(signal, 1.0, P, request=1)
    assert (m.state, m.in_flight, m.requests, dict(m.deadlines), m.close_pending) == before


def test_a_due_deadline_after_it_was_disarmed_is_illegal() -> None:
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, P)
    m.step(Signal.TOOL_CALL, 1.0, P, request=1)
    m.step(Signal.REQUEST, 2.0, P)
    with pytest.raises(IllegalStep, match="not allowed in state in_flight"):
        m.step(Signal.SUSPEND_DUE, 3.0, P)


def test_the_table_names_every_legal_step_and_only_those() -> None:
    assert (State.CLOSED, Signal.REQUEST) not in TABLE
    assert TABLE[(State.SUSPENDED, Signal.REQUEST)] is State.IN_FLIGHT
    assert TABLE[(State.RUN_END, Signal.RUN_END_DUE)] is State.SUSPENDED
    assert all(
        target is not State.IN_FLIGHT or sig is Signal.REQUEST for (_, sig), target in TABLE.items()
    )


def test_the_hooks_path_suspend_restore_close() -> None:
    hooks = Policy(0, 0, 0, False)
    m = SessionMachine()
    assert m.step(Signal.HOST_SUSPEND, 0.0, hooks) == [Send("session_suspend", "slow_tool")]
    with pytest.raises(IllegalStep):
        m.step(Signal.HOST_SUSPEND, 0.0, hooks)
    assert m.step(Signal.HOST_RESTORE, 1.0, hooks) == [Restore("tool_done")]
    assert m.step(Signal.HOST_CLOSE, 2.0, hooks) == [Send("session_close", "run_end"), Forget()]


def test_the_grace_follows_the_0_9_quantile_of_return_gaps_clamped() -> None:
    grace = AdaptiveGrace(5.0)
    assert grace.seconds == 5.0
    for gap in [1.0] * 9 + [30.0]:
        grace.observe(gap)
    assert grace.seconds == 30.0  # the 0.9 quantile of ten gaps is the largest
    grace.observe(1.0)
    assert grace.seconds == 1.0
    for _ in range(300):
        grace.observe(0.01)
    assert grace.seconds == 0.5  # clamped below
    for _ in range(300):
        grace.observe(600.0)
    assert grace.seconds == 60.0  # and above
    off = AdaptiveGrace(0.0)
    off.observe(3.0)
    assert off.seconds == 0.0


def test_a_prompt_extends_its_sessions_or_is_a_side_call() -> None:
    sys_, user = {"role": "system", "content": "s"}, {"role": "user", "content": "u"}
    base = PromptShape.of({"messages": [sys_, user]})
    longer = PromptShape.of({"messages": [sys_, user, {"role": "assistant", "content": "a"}]})
    guard = PromptShape.of({"messages": [{"role": "system", "content": "guard"}, user]})
    assert base is not None and longer is not None and guard is not None
    assert longer.extends(base) and base.extends(base)
    assert not guard.extends(base) and not base.extends(longer)
    text = PromptShape.of({"prompt": "abcdef"})
    assert text is not None
    more = PromptShape.of({"prompt": "abcdefgh"})
    assert more is not None and more.extends(text.slim())
    other = PromptShape.of({"prompt": "xbcdefgh"})
    assert other is not None and not other.extends(text.slim())


def test_pending_state_round_trips_on_wall_time_and_skips_bad_rows() -> None:
    from ramakv_proxy import pending

    m = SessionMachine()
    m.step(Signal.REQUEST, 100.0, P)
    m.step(Signal.TOOL_CALL, 101.0, P, request=1)
    busy = SessionMachine()
    busy.step(Signal.REQUEST, 100.0, P)
    doc = pending.dump({"a": m, "b": busy}, mono_now=102.0, wall_now=5000.0, idle_s=900.0)
    assert doc["sessions"]["a"]["deadlines"] == {"suspend": 5001.0, "idle": 5899.0}
    assert doc["sessions"]["b"] == {
        "state": "idle",
        "suspended_by": None,
        "final_at": None,
        "deadlines": {"idle": 5900.0},
    }
    doc["sessions"]["c"] = {"state": "closed", "deadlines": {}}
    doc["sessions"]["d"] = "not a row"
    back = pending.load(doc, mono_now=7.0, wall_now=5001.0)
    assert set(back) == {"a", "b"}
    assert back["a"].state is State.TOOL_PAUSE and back["a"].deadlines == {
        "suspend": 7.0,
        "idle": 905.0,
    }
    assert pending.load({"version": 99}, 0.0, 0.0) == {}


def test_a_prompt_extending_the_last_side_call_means_the_history_was_rewritten() -> None:
    """A framework that trims or summarises its history sends a prompt that does not extend
    the session's: a side call at first, but when the next prompt extends that one, the
    conversation has moved on and it becomes the session's line again (a guardrail's calls
    do not extend each other; the same side call retried stays a side call)."""
    from typing import Any, cast

    from ramakv_proxy.lifecycle import Lifecycle
    from ramakv_proxy.settings import ProxySettings
    from ramakv_sdk.lifecycle.clock import ManualClock

    def shape(*texts: str) -> PromptShape:
        s = PromptShape.of({"messages": [{"role": "user", "content": t} for t in texts]})
        assert s is not None
        return s

    settings = ProxySettings(upstream="http://engine", daemon_url="http://daemon")
    life = Lifecycle(settings, cast(Any, None), ManualClock(), cast(Any, None))
    assert not life.route("s", shape("a", "b")).branch
    assert life.route("s", shape("guard", "b")).branch
    assert life.route("s", shape("guard", "b")).branch  # the same side call, retried
    assert life.route("s", shape("guard2", "c")).branch  # another guardrail call
    assert not life.route("s", shape("a", "b", "c")).branch  # the run's next step
    assert life.route("s", shape("summary", "d")).branch  # the history rewritten...
    assert not life.route("s", shape("summary", "d", "e")).branch  # ...and moving on
    assert not life.route("s", shape("summary", "d", "e", "f")).branch
    assert (life.stats.branches, life.stats.branches_promoted) == (4, 1)
