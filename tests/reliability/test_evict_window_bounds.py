"""The eviction window's bounds: watched from the cache's answer, loaded intents watched."""

from __future__ import annotations

from ramakv_daemon.evict_window import GRACE_MIN_S, EvictWindow

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
