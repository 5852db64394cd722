"""Order hints: move chunks to the cold or warm end of an lmcache 0.5.6 tier's eviction order."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

from ascend_ext.request_error import RequestError

Position = Literal["cold", "warm"]
POSITIONS: tuple[Position, ...] = ("cold", "warm")

# (lock, mapping) attribute names of the tiers whose eviction order lives in their policy's
# mapping: LocalCPUBackend's hot cache and LocalDiskBackend's index.
_ORDERED_TIERS = (("cpu_lock", "hot_cache"), ("disk_lock", "dict"))


def parse_position(body: dict) -> Position:
    """Validate ``position``: required, "cold" or "warm"."""
    position = body.get("position")
    if position is None:
        raise RequestError("missing required field 'position'")
    if position == "cold":
        return "cold"
    if position == "warm":
        return "warm"
    raise RequestError("field 'position' must be 'cold' or 'warm'")


def _evicts_from_front(policy: Any) -> bool | None:
    """True: the policy evicts the mapping's first entries first (LRU); False: its last
    (MRU); None: its order is no mapping position (LFU counts hits, FIFO keeps a plain
    dict that can only append), so a hint cannot move anything there."""
    from lmcache.v1.storage_backend.cache_policy.lru import LRUCachePolicy
    from lmcache.v1.storage_backend.cache_policy.mru import MRUCachePolicy

    if isinstance(policy, LRUCachePolicy):
        return True
    if isinstance(policy, MRUCachePolicy):
        return False
    return None


def tier_parts(backend: Any) -> tuple[Any, OrderedDict, bool | None] | None:
    """(lock, ordered mapping, evicts-from-front) of a tier, or None when it keeps no order
    of its own (a remote tier: lmcache's storage decides there)."""
    policy = getattr(backend, "cache_policy", None)
    for lock_name, map_name in _ORDERED_TIERS:
        lock, mapping = getattr(backend, lock_name, None), getattr(backend, map_name, None)
        if lock is not None and mapping is not None and policy is not None:
            front = _evicts_from_front(policy) if isinstance(mapping, OrderedDict) else None
            return lock, mapping, front
    return None


# Kept on the tier's backend object: the keys hinted cold and not warmed since. The cold
# segment is the run of them at the evicted end; a new cold hint joins it behind the older
# ones (coldest first).
_COLD_ATTR = "_ramakv_cold_keys"


def _cold_keys(backend: Any) -> dict[Any, None]:
    cold = getattr(backend, _COLD_ATTR, None)
    if cold is None:
        cold = {}
        setattr(backend, _COLD_ATTR, cold)
    return cold


def _cold_segment(mapping: OrderedDict, front: bool, cold: dict[Any, None]) -> list[Any]:
    """The keys already cold at the evicted end, the first evicted first."""
    segment: list[Any] = []
    for key in mapping if front else reversed(mapping):
        if key not in cold:
            break
        segment.append(key)
    return segment


def place(backend: Any, keys: Sequence[Any], position: Position) -> tuple[int, set[int]]:
    """Move the tier's copies of ``keys`` to one end of its eviction order; returns (copies
    moved, indexes of the keys it holds, moved or not).

    Within one hint the list's first chunk ends up evicted last and its last chunk first,
    at either end: a prefix loses its tail before its head (lmcache's own touch_cache
    orders a lookup's keys the same way). Cold chunks queue behind those hinted cold
    before them (still at the evicted end): released longest ago goes first, so a session
    paused a moment ago is not evicted ahead of one that ended earlier. Only the order
    changes, under the tier's lock: a pinned or in-use chunk stays unevictable wherever it
    sits (the policy skips it), and no reference count, size or file is touched.
    """
    parts = tier_parts(backend)
    if parts is None:
        return 0, set()
    lock, mapping, front = parts
    found: set[int] = set()
    moved = 0
    # "cold" walks the list forwards to the evicted end, "warm" backwards to the kept end, so
    # the last chunk moved sits at the very end: the list's last (cold) or first (warm).
    order = range(len(keys)) if position == "cold" else range(len(keys) - 1, -1, -1)
    with lock:
        cold = _cold_keys(backend) if front is not None else {}
        older: list[Any] = []
        if position == "cold" and front is not None and cold:
            hinted = set(keys)
            older = [k for k in _cold_segment(mapping, front, cold) if k not in hinted]
        for i in order:
            key = keys[i]
            if key not in mapping:
                continue
            found.add(i)
            if front is None:
                continue
            # LRU evicts from the front: cold is first (last=False). MRU evicts from the back.
            mapping.move_to_end(key, last=(position == "warm") == front)
            moved += 1
            if position == "cold":
                cold[key] = None
            else:
                cold.pop(key, None)
        # The older cold chunks back in front of the new ones, in their own order.
        for key in reversed(older):
            mapping.move_to_end(key, last=not front)
        if len(cold) > 2 * len(mapping) + 64:  # keys evicted since: forget them
            for key in [k for k in cold if k not in mapping]:
                del cold[key]
    return moved, found
