"""The bounded hash cache behind get_cached_hashes(); runs without lmcache."""

from __future__ import annotations

import pytest

from ascend_ext import hash_metrics
from ascend_ext.hash_cache import HashCache


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_put_pop_once() -> None:
    c = HashCache(max_entries=4, ttl_s=10, clock=Clock())
    c.put("a", ["1", "-2"])
    assert "a" in c and len(c) == 1
    assert c.pop("a") == ["1", "-2"]
    assert c.pop("a") is None and len(c) == 0


def test_entries_expire_and_are_counted() -> None:
    clock = Clock()
    c = HashCache(max_entries=100, ttl_s=10, clock=clock)
    expired = hash_metrics.HASHES_DROPPED.labels(reason="expired")
    before = expired._value.get()
    c.put("old", ["1"])
    clock.t += 5
    c.put("mid", ["2"])
    clock.t += 6  # "old" is 11 s old, "mid" 6 s
    assert c.pop("old") is None
    assert c.pop("mid") == ["2"]
    clock.t += 100
    c.put("x", ["3"])
    clock.t += 11
    c.put("y", ["4"])  # a put sweeps expired entries without anyone popping them
    assert "x" not in c and len(c) == 1
    assert c.expired == 2 and expired._value.get() - before == 2


def test_capacity_drops_oldest_and_reput_refreshes() -> None:
    c = HashCache(max_entries=2, ttl_s=10, clock=Clock())
    c.put("a", ["1"])
    c.put("b", ["2"])
    c.put("a", ["1b"])  # re-lookup (preemption) moves "a" to the newest end
    c.put("c", ["3"])
    assert c.pop("b") is None and c.capped == 1
    assert c.pop("a") == ["1b"] and c.pop("c") == ["3"]


def test_gauge_follows_size_and_clear() -> None:
    c = HashCache(max_entries=5, ttl_s=10, clock=Clock())
    for i in range(3):
        c.put(str(i), [])
    assert hash_metrics.HASHES_CACHED._value.get() == 3
    c.clear()
    assert len(c) == 0 and hash_metrics.HASHES_CACHED._value.get() == 0


def test_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError):
        HashCache(max_entries=0)
    with pytest.raises(ValueError):
        HashCache(ttl_s=0)
