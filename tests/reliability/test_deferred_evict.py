"""ascend_ext's deferred evictions: deadlines, the last-moment claim, keeps and generations."""

from __future__ import annotations

import threading

import pytest

from ascend_ext.deferred_evict import DeferredEvictions

S = 1_000_000_000  # ns


class Clocks:
    """A monotonic and a wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.mono = 0.0
        self.wall = 100 * S


def evictions(kept_max: int = 8) -> tuple[DeferredEvictions, Clocks]:
    c = Clocks()
    return DeferredEvictions(lambda: c.mono, kept_max, lambda: c.wall), c


def test_a_delete_is_carried_out_only_until_its_deadline() -> None:
    d, c = evictions()
    d.add(["x", "y"], None, 100 * S, 1.0, not_after=102 * S)
    c.mono, c.wall = 1.0, 101 * S
    assert d.claim(["x"]) == ["x"]  # due, deadline not passed
    d.finish(["x"])
    c.wall = 102 * S + 1
    assert d.due() == [(None, ["y"])]
    assert d.claim(["y"]) == [] and d.expired == 1  # past it: dropped, not deleted
    assert d.pending == {}


def test_an_evict_arriving_past_its_deadline_is_refused() -> None:
    d, c = evictions()
    c.wall = 103 * S
    added = d.add(["x"], None, 100 * S, 1.0, not_after=102 * S)
    assert added.expired == ["x"] and added.deferred == 0 and d.pending == {}


def test_a_keep_cancels_an_older_delete_and_refuses_older_evicts_later() -> None:
    d, c = evictions()
    d.add(["x"], None, 10, 1.0)
    assert d.keep(["x"], 11) == (1, [])
    assert d.add(["x"], None, 10, 1.0).stale == ["x"]  # a late copy of the old evict
    assert d.add(["x"], None, 12, 1.0).deferred == 1  # released again since: goes
    c.mono = 2.0
    assert d.claim(["x"]) == ["x"]


def test_late_is_said_to_every_later_keep_until_a_newer_evict() -> None:
    # The first "late" answer may be lost with its connection; a retried keep must hear
    # it too, or the daemon would report the chunk kept.
    d, c = evictions()
    d.add(["x"], None, 10, 0.0)
    d.finish(d.claim(["x"]))
    assert d.keep(["x"], 11) == (0, ["x"])
    assert d.keep(["x"], 12) == (0, ["x"])
    d.add(["x"], None, 13, 1.0)
    assert d.keep(["x"], 14) == (1, [])


def test_a_keep_meeting_a_removal_under_way_answers_once_it_is_done() -> None:
    d, _ = evictions()
    d.add(["x"], None, 10, 0.0)
    assert d.claim(["x"]) == ["x"]  # the worker is removing x now
    answers: list[tuple[int, list[str]]] = []
    keeper = threading.Thread(target=lambda: answers.append(d.keep(["x"], 11)))
    keeper.start()
    keeper.join(0.05)  # (not a synchronisation: the keep must still be waiting after it)
    assert answers == []
    d.finish(["x"])
    keeper.join(30)
    assert answers == [(0, ["x"])]


def test_kept_generations_pushed_out_raise_a_floor() -> None:
    d, _ = evictions(kept_max=2)
    for i, h in enumerate(["a", "b", "c"]):
        d.keep([h], 10 + i)
    assert "a" not in d.kept and d.kept_floor == 10
    assert d.add(["a"], None, 10, 1.0).stale == ["a"]  # safe side: refused
    assert d.add(["a"], None, 11, 1.0).deferred == 1


@pytest.mark.parametrize("generation", [-1, True, 1.5, "1"])
def test_bad_generations_are_refused(generation: object) -> None:
    from ascend_ext.deferred_evict import parse_generation, parse_not_after
    from ascend_ext.request_error import RequestError

    with pytest.raises(RequestError, match="'generation' must be a non-negative integer"):
        parse_generation({"generation": generation})
    with pytest.raises(RequestError, match="'not_after_ns' must be a non-negative integer"):
        parse_not_after({"not_after_ns": generation})
