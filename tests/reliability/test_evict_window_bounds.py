"""The eviction window's bounds: from the answer to the deadline; loaded intents; releases."""

from __future__ import annotations

import asyncio

from ramakv_daemon.delivery.evict_window import (
    CLOCK_MARGIN_S,
    EXPIRE_AFTER_DUE_S,
    GRACE_MIN_S,
    EvictWindow,
)

Reports = list[tuple[str, list[str]]]


def window(defer_s: float = 5.0) -> tuple[EvictWindow, Reports]:
    reports: Reports = []
    return EvictWindow(defer_s, lambda outcome, hs, _s: reports.append((outcome, hs))), reports


def test_a_deferred_delete_is_watched_from_the_answer_not_the_write() -> None:
    # The kill test's violations: a 1000-chunk evict written at t=0 reached the cache
    # 40-80 ms later, so its delete ran after write + defer_s; a reference just after
    # write + defer_s got no keep. Watched from the answer (plus a grace), it gets one.
    w, _ = window(5.0)
    w.wrote(["x"], w.generation(), at=0.0)
    w.answered(["x"], ok=True, deferred=True, at=0.08)
    assert w.referenced(["x"], now=5.05) == ["x"]
    w.wrote(["y"], w.generation(), at=0.0)
    w.answered(["y"], ok=True, deferred=True, at=0.08)
    assert w.referenced(["y"], now=0.08 + 5.0 + max(GRACE_MIN_S, 5.0) + 0.01) == []


def test_intents_loaded_at_start_up_are_watched_before_they_are_sent_again() -> None:
    # An earlier run's delete may still be pending in the cache: a change referencing the
    # chunk before the re-send must get a keep before its commit.
    w, _ = window(5.0)
    w.loaded(["x"], now=100.0)
    assert w.referenced(["x"], now=101.0) == ["x"]
    assert "x" in w.owed()
    stock, _ = window(0.0)  # a cache that does not defer has nothing pending
    stock.loaded(["x"], now=100.0)
    assert stock.open == {}


def test_a_cache_that_honours_deadlines_is_watched_until_the_deadline_only() -> None:
    w, _ = window(5.0)
    g = w.generation()
    assert w.not_after(g) == g + int((5.0 + EXPIRE_AFTER_DUE_S) * 1e9)
    w.wrote(["x"], g, at=0.0)
    w.answered(["x"], ok=True, deferred=True, at=0.08, expires=True)
    deadline = 5.0 + EXPIRE_AFTER_DUE_S + CLOCK_MARGIN_S
    assert w.open["x"].until == deadline
    assert w.referenced(["x"], now=deadline + 0.01) == []


def test_a_keep_released_at_its_deadline_is_never_reported_exposed() -> None:
    loop = asyncio.new_event_loop()
    try:
        w, reports = window(5.0)
        w.wrote(["x", "y"], w.generation(), at=0.0)
        w.answered(["x", "y"], ok=True, deferred=True, at=0.01, expires=True)
        gate = loop.create_future()
        assert w.referenced(["x", "y"], now=1.0, gate=gate) == ["x", "y"]
        w.release(gate)  # the deadline passed, the keep never answered
        assert gate.done() and w.keeps["x"].protected
        gen = w.generation()
        # Answered at last: x's delete had run (before the commit: missed); y given up.
        w.kept(["x"], True, True, ["x"], now=2.0, generation=gen, expires=True)
        w.kept(["y"], False, True, [], now=1000.0, generation=gen)
        assert ("exposed", ["x"]) not in reports and ("exposed", ["y"]) not in reports
        assert ("missed", ["x"]) in reports and ("missed", ["y"]) in reports
    finally:
        loop.close()


def test_without_a_known_deadline_a_released_keep_answered_late_is_exposed() -> None:
    loop = asyncio.new_event_loop()
    try:
        w, reports = window(5.0)
        w.wrote(["x"], w.generation(), at=0.0)  # never answered: expires unknown
        gate = loop.create_future()
        w.referenced(["x"], now=1.0, gate=gate)
        w.release(gate)
        w.kept(["x"], True, True, ["x"], now=2.0, generation=w.generation())
        assert ("exposed", ["x"]) in reports
    finally:
        loop.close()
