"""Packed maps' chunks counted in a start-up's count arrays with numpy, many maps at once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any

from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.packed import PackedMap, text_of
from ramakv_daemon.core.session import Session

# Sessions whose counts one bulk pass takes: 64 x 512 codes, a few ms (a loop slice).
GROUP = 64


def _view(buffer: object, dtype: Any) -> Any:
    import numpy as np  # a CountTable exists only once a store's load imported it

    return np.frombuffer(memoryview(buffer).cast("B"), dtype=dtype)  # type: ignore[arg-type]


def counted_above(m: PackedMap, table: CountTable, own: int) -> int:
    """Distinct chunks of ``m`` whose count in ``table`` is above ``own``."""
    known = table.counts_searched(m.codes)  # a suspend's own map: searched already
    if known is not None:
        return int((known > own).sum())
    return counts_above([m], table, own)[0]


def counts_above(maps: Sequence[PackedMap], table: CountTable, own: int) -> list[int]:
    """For each map, its distinct chunks whose count in ``table`` is above ``own``.

    Every map's codes go through one pass: the table's bitmap (CountTable.code_filter)
    drops the codes it never held, nearly all of a suspended map's after a restart, at a
    probe each; the few left are searched in the keys at once, each in its bucket of a
    few keys (:meth:`CountTable.positions`), the ones not among them in the table's dict. A
    binary search per code (~0.1-0.15 ms a suspended 512-chunk map at 20,000 x 512) was the
    cost of a snapshot at scale.

    The bitmap and the buckets are built by the first call for several maps (0.1-0.3 s
    at 10 M keys); one map alone (an event's record) never builds them: until a bulk read
    did, its codes are searched in the whole array, as a handful of maps cost (in the
    buckets once a refcount step over many hashes built them).
    """
    import numpy as np

    if not maps:
        return []
    codes = np.frombuffer(b"".join(m.codes for m in maps), dtype=np.int64)
    ends = np.cumsum(np.fromiter((len(m.codes) >> 3 for m in maps), np.int64, len(maps)))
    bulk = len(maps) > 1 or table.indexed
    if bulk:
        bitmap, shift = table.code_filter()
        top = (codes >> shift) + (len(bitmap) << 2)
        probe = _view(bitmap, np.uint8)[top >> 3] >> (top & 7).astype(np.uint8)
        at = np.flatnonzero(probe & np.uint8(1))
    else:
        at = np.arange(len(codes))
    cand = codes[at]
    keep = _counts_of(cand, table, bulk) > own
    at, cand = at[keep], cand[keep]
    if not len(at):
        return [0] * len(maps)
    owner = np.searchsorted(ends, at, side="right")
    # Distinct (map, code) pairs: sorted by map, then code.
    order = np.lexsort((cand, owner))
    owner, cand = owner[order], cand[order]
    first = np.ones(len(owner), dtype=bool)
    first[1:] = (owner[1:] != owner[:-1]) | (cand[1:] != cand[:-1])
    return np.bincount(owner[first], minlength=len(maps)).tolist()


def _counts_of(cand: Any, table: CountTable, bulk: bool) -> Any:
    """The live count of each code of ``cand`` (0 when absent); ``bulk``: through the
    table's read indexes (built if need be), else without them."""
    import numpy as np

    keys_buf, counts_buf = table.arrays
    keys = _view(keys_buf, np.int64)
    n = np.zeros(len(cand), dtype=np.int64)
    found = np.zeros(len(cand), dtype=bool)
    if len(cand) and len(keys):
        if bulk or table.bucketed:  # the buckets: built by a bulk read or refcount step
            pos = table.positions(cand)
        else:
            pos = np.minimum(np.searchsorted(keys, cand), len(keys) - 1)
        found = keys[pos] == cand
        n[found] = _view(counts_buf, np.int32)[pos[found]]
    if not table.extra:
        return n
    rest = np.flatnonzero(~found)
    if not bulk:
        texts = map(text_of, cand[rest].tolist())
        n[rest] = np.fromiter(map(table.extra.get, texts, repeat(0)), np.int64, len(rest))
        return n
    codes = table.extra_codes
    if codes:
        listed = rest[np.fromiter(map(codes.__contains__, cand[rest].tolist()), bool, len(rest))]
        get = table.extra.get
        for j in listed.tolist():
            n[j] = get(text_of(int(cand[j])), 0)
    return n


def suspended_counts(
    sessions: Sequence[Session | None],
    counts: Mapping[str, int],
    forks: Mapping[str, Sequence[Fork]],
) -> dict[int, int]:
    """Index -> shared_count for the suspended packed sessions without open forks among
    ``sessions``, counted in one pass (see :func:`counts_above`); the rest are left to
    trace.protocol.shared_count (a set walk for an active map)."""
    if not isinstance(counts, CountTable):
        return {}
    picked = [
        (i, s.chunk_hashes)
        for i, s in enumerate(sessions)
        if s is not None
        and s.suspended
        and isinstance(s.chunk_hashes, PackedMap)
        and not forks.get(s.session_id)
    ]
    if not picked:
        return {}
    found = counts_above([m for _, m in picked], counts, 0)
    return {i: n for (i, _), n in zip(picked, found, strict=True)}
