"""Bounded store of chunk hashes per lookup: entries expire and are capped, aborts cannot leak."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ascend_ext import hash_metrics as metrics

DEFAULT_MAX_ENTRIES = 4096
DEFAULT_TTL_S = 900.0


class HashCache:
    """lookup_id -> hex chunk hashes, oldest first; pop() hands an entry out exactly once."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries <= 0:
            raise ValueError("max_entries must be positive")
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        # Insertion order == expiry order because every put uses the same TTL and
        # re-puts move to the end; that lets expiry sweep from the front only.
        self._entries: OrderedDict[str, tuple[float, list[str]]] = OrderedDict()
        self._lock = threading.Lock()
        self.expired = 0
        self.capped = 0

    def put(self, lookup_id: str, hashes: list[str]) -> None:
        """Remember the hashes of one lookup, replacing an older lookup of the same id."""
        now = self._clock()
        with self._lock:
            self._entries.pop(lookup_id, None)
            self._entries[lookup_id] = (now + self.ttl_s, hashes)
            self._sweep(now)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
                self.capped += 1
                metrics.HASHES_DROPPED.labels(reason="capacity").inc()
            metrics.HASHES_CACHED.set(len(self._entries))

    def pop(self, lookup_id: str) -> list[str] | None:
        """Take the hashes of a lookup out of the cache; None if absent or expired."""
        now = self._clock()
        with self._lock:
            item = self._entries.pop(lookup_id, None)
            self._sweep(now)
            metrics.HASHES_CACHED.set(len(self._entries))
        if item is None:
            return None
        expiry, hashes = item
        if expiry <= now:
            self._count_expired(1)
            return None
        return hashes

    def clear(self) -> None:
        """Drop everything (the client is closing)."""
        with self._lock:
            self._entries.clear()
            metrics.HASHES_CACHED.set(0)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, lookup_id: object) -> bool:
        return lookup_id in self._entries

    def _sweep(self, now: float) -> None:
        """Drop expired entries from the front; caller holds the lock."""
        n = 0
        while self._entries:
            key, (expiry, _) = next(iter(self._entries.items()))
            if expiry > now:
                break
            del self._entries[key]
            n += 1
        if n:
            self._count_expired(n)

    def _count_expired(self, n: int) -> None:
        self.expired += n
        metrics.HASHES_DROPPED.labels(reason="expired").inc(n)
