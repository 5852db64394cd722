"""The adaptive run-end grace learns from run ends whose session never came back (issue
31, workload (b)): the grace itself, and the machine's horizon that reports them, once."""

from __future__ import annotations

import random

import pytest

from ramakv_proxy.grace import HORIZON_S, MAX_S, MIN_S, WINDOW, AdaptiveGrace
from ramakv_sdk.lifecycle.machine import (
    Arm,
    Count,
    Disarm,
    IllegalStep,
    NoReturn,
    Policy,
    Restore,
    ReturnGap,
    Send,
    SessionMachine,
    Signal,
    State,
)

H = Policy(tool_pause_s=2.0, run_end_s=5.0, idle_s=900.0, horizon_s=60.0)


def old_quantile(gaps: list[float]) -> float:
    """The grace before non-returns counted: the 0.9 quantile of return gaps, clamped."""
    ordered = sorted(gaps)
    return min(MAX_S, max(MIN_S, ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]))


def test_sessions_that_never_come_back_shrink_the_grace_to_its_floor() -> None:
    grace = AdaptiveGrace(5.0)
    for _ in range(10):
        grace.observe_no_return()
    assert grace.seconds == MIN_S and grace.observed == 10


@pytest.mark.parametrize("seed", range(5))
def test_with_every_session_back_the_grace_is_the_return_gaps_quantile(seed: int) -> None:
    rng = random.Random(seed)
    gaps = [rng.uniform(0.0, 90.0) for _ in range(rng.randint(1, 300))]
    grace = AdaptiveGrace(5.0)
    for gap in gaps:
        grace.observe(gap)
    assert grace.seconds == old_quantile(gaps[-WINDOW:])


def test_non_returns_count_as_run_ends_that_needed_no_grace() -> None:
    """The smallest grace that fewer than one run end in ten came back after."""
    grace = AdaptiveGrace(5.0)
    for _ in range(50):
        grace.observe_no_return()
    for _ in range(50):
        grace.observe(12.0)
    assert grace.seconds == 12.0  # half came back at 12 s: a shorter grace misses them
    grace = AdaptiveGrace(5.0)
    for _ in range(90):
        grace.observe_no_return()
    for _ in range(10):
        grace.observe(12.0)
    assert grace.seconds == 12.0  # one in ten still came back after any shorter grace
    grace.observe_no_return()
    assert grace.seconds == MIN_S  # fewer than one in ten now: no grace is worth it
    # Returns again outweigh the older non-returns as the window moves on.
    for _ in range(WINDOW):
        grace.observe(3.0)
    assert grace.seconds == 3.0


def test_a_grace_that_is_off_neither_learns_nor_waits_for_returns() -> None:
    off = AdaptiveGrace(0.0)
    off.observe_no_return()
    assert off.seconds == 0.0 and off.observed == 0 and off.horizon == 0.0
    assert AdaptiveGrace(5.0).horizon == HORIZON_S == MAX_S


def test_no_return_within_the_horizon_is_reported_once() -> None:
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, H)
    cmds = m.step(Signal.FINAL, 1.0, H, request=1)
    assert cmds == [Arm("run_end", 6.0), Arm("horizon", 61.0), Arm("idle", 901.0)]
    m.step(Signal.RUN_END_DUE, 6.0, H)
    assert m.step(Signal.HORIZON_DUE, 61.0, H) == [NoReturn()]
    assert m.state is State.SUSPENDED and m.deadlines == {"idle": 901.0}
    # Back after the horizon: still a misprediction, but no second outcome for the grace.
    cmds = m.step(Signal.REQUEST, 100.0, H)
    assert cmds == [Disarm("idle"), Count("run_end_mispredictions"), Restore("next_request")]


def test_a_return_within_the_horizon_is_a_gap_and_the_horizon_is_dropped() -> None:
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, H)
    m.step(Signal.FINAL, 1.0, H, request=1)
    m.step(Signal.RUN_END_DUE, 6.0, H)
    cmds = m.step(Signal.REQUEST, 13.0, H)
    assert cmds == [
        Disarm("horizon"),
        Disarm("idle"),
        ReturnGap(12.0),
        Count("run_end_mispredictions"),
        Restore("next_request"),
    ]
    before = (m.state, dict(m.deadlines), m.final_at)
    with pytest.raises(IllegalStep):
        m.step(Signal.HORIZON_DUE, 61.0, H)
    assert (m.state, dict(m.deadlines), m.final_at) == before


def test_a_session_closed_before_the_horizon_did_not_come_back() -> None:
    short_idle = Policy(tool_pause_s=2.0, run_end_s=5.0, idle_s=30.0, horizon_s=60.0)
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, short_idle)
    m.step(Signal.FINAL, 0.0, short_idle, request=1)
    m.step(Signal.RUN_END_DUE, 5.0, short_idle)
    cmds = m.step(Signal.IDLE_DUE, 30.0, short_idle)
    assert cmds[:2] == [Disarm("horizon"), NoReturn()] and cmds.count(NoReturn()) == 1
    assert Send("session_close", "idle", inferred=True) in cmds
    assert m.state is State.CLOSED


def test_the_horizon_never_ends_before_the_grace_in_force() -> None:
    """A start grace above the horizon: a return it catches is a return, not a non-return."""
    long = Policy(tool_pause_s=2.0, run_end_s=90.0, idle_s=900.0, horizon_s=60.0)
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, long)
    assert Arm("horizon", 90.0) in m.step(Signal.FINAL, 0.0, long, request=1)
    assert ReturnGap(70.0) in m.step(Signal.REQUEST, 70.0, long)


def test_without_a_horizon_the_machine_is_as_before() -> None:
    """The hooks' policy and a grace that is off set no horizon."""
    m = SessionMachine()
    m.step(Signal.REQUEST, 0.0, Policy())
    assert m.step(Signal.FINAL, 1.0, Policy(), request=1) == [
        Arm("run_end", 6.0),
        Arm("idle", 901.0),
    ]
    assert ReturnGap(499.0) in m.step(Signal.REQUEST, 500.0, Policy())  # however late
