"""Start-up rebuild of the refcount and parked tables from millions of stored references."""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection, Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, cast

from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.packed import PackedMap, code_of, text_of
from ramakv_daemon.core.session import Session

if TYPE_CHECKING:
    import numpy as np

# Counter.update's counting loop (C in CPython; typeshed does not list this private helper):
# it counts into any dict, here the one _table_for picked.
_count_elements: Callable[[dict[str, int], Iterable[str]], None] = vars(collections)[
    "_count_elements"
]

# References from which the count's table takes the hash-storing layout (see _table_for).
_GENERAL_LAYOUT_FROM = 1 << 17

Table = dict[str, int] | CountTable


class Built:
    """A rebuilt table with what the refcount table derives from it, computed in bulk:
    the total, the hashes counted twice or more and (None: to be derived) their codes."""

    __slots__ = ("table", "total", "shared", "shared_codes")

    def __init__(
        self, table: Table, total: int, shared: set[str], shared_codes: set[int] | None = None
    ) -> None:
        self.table, self.total, self.shared = table, total, shared
        self.shared_codes = shared_codes


def refcounts(sessions: Iterable[Session], forks: Iterable[Fork] = ()) -> Built:
    """Same table as :func:`~ramakv_daemon.core.manager.recompute_refcounts`: each
    non-suspended map's distinct hashes once, plus every open fork's hashes."""
    held = [s.chunk_hashes for s in sessions if not s.suspended]
    return _build(held, [f.hashes for f in forks])


def parked(sessions: Iterable[Session], beside: Table | None = None) -> Table:
    """Same table as :func:`~ramakv_daemon.core.manager.recompute_parked`: hash -> number
    of suspended sessions whose map lists it.

    ``beside``: the refcount table built from the same load. When it is an array table,
    the parked table is one too, over its keys (and those of the suspended maps): every
    loaded chunk has a slot in both, so a suspend of a loaded session counts into arrays
    (:meth:`CountTable.beside`), not into a dict that grew by ~100 bytes a chunk."""
    own = _build([s.chunk_hashes for s in sessions if s.suspended], []).table
    if not isinstance(beside, CountTable):
        return own
    if not isinstance(own, CountTable):  # no packed suspended map: the refcounts' keys
        table = beside.beside()
        for h, n in own.items():
            table[h] = n
        return table
    return _merged_keys(beside, own)


def _merged_keys(beside: CountTable, own: CountTable) -> CountTable:
    """``own``'s counts over the union of both tables' keys (``beside``'s own keys when
    they hold all of ``own``'s): one pass of insertions into sorted arrays, no sort."""
    import numpy as np

    # Both built by _array_count: numpy arrays.
    keys_b = cast("np.ndarray[Any, Any]", beside.arrays[0])
    keys_o, counts_o = cast("tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]", own.arrays)
    at = np.searchsorted(keys_b, keys_o)
    inside = keys_b[np.minimum(at, len(keys_b) - 1)] == keys_o
    live = int(np.count_nonzero(counts_o))
    if inside.all():
        counts = np.zeros(len(keys_b), dtype=np.int32)
        counts[at] = counts_o
        table = beside.beside(counts, live)
    else:
        keys = np.insert(keys_b, at[~inside], keys_o[~inside])
        counts = np.zeros(len(keys), dtype=np.int32)
        counts[np.searchsorted(keys, keys_o)] = counts_o
        table = CountTable(keys, counts, {}, live=live)
        table.bucket_starts()  # at load, not on the first event after listening
    for h, n in own.extra.items():
        table[h] = n
    return table


def _build(maps: Sequence[Sequence[str]], holds: Sequence[Collection[str]]) -> Built:
    """Each map's distinct hashes once, plus each hold's hashes (a hold lists each once)."""
    packed = [m for m in maps if isinstance(m, PackedMap)]
    if not packed:
        counts = _dict_count([_distinct(m) for m in maps] + list(holds))
        return Built(counts, sum(counts.values()), {h for h, n in counts.items() if n > 1})
    table = _array_count(packed)
    # Maps with a hash that is not canonical, and fork holds: counted one by one into the
    # arrays (their canonical hashes) or the table's dict (the rest). Few, as a rule.
    get = table.get
    for hashes in chain((_distinct(m) for m in maps if not isinstance(m, PackedMap)), holds):
        for h in hashes:
            table[h] = get(h, 0) + 1
    import numpy as np

    keys_arr, counts_arr = cast("tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]", table.arrays)
    extra = table.extra
    total = int(counts_arr.sum(dtype=np.int64)) + sum(extra.values())
    many = keys_arr[counts_arr > 1].tolist()
    shared = set(map(text_of, many))
    codes = set(many)
    for h, n in extra.items():
        if n > 1:
            shared.add(h)
            code = code_of(h)
            if code is not None:
                codes.add(code)
    return Built(table, total, shared, codes)


def _array_count(maps: Sequence[PackedMap]) -> CountTable:
    """The distinct-per-map counts of packed maps, as sorted code and count arrays.

    One sort of every code (the bulk of the time: ~2 s at 25 M), then passes that touch
    only the repeated codes, a few percent of them; no array of one entry per reference
    is made beyond the codes, their sorted copy and one mask.
    """
    import numpy as np

    codes = np.frombuffer(b"".join(m.codes for m in maps), dtype=np.int64)
    ordered = np.sort(codes)
    first = np.empty(len(ordered), dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    keys = ordered[first]
    # The k-th repeat (position p in the sorted codes) belongs to key p - k - 1.
    again = np.flatnonzero(~first)
    del ordered, first
    counts = np.ones(len(keys), dtype=np.int32)
    if len(again):
        owners = again - np.arange(1, len(again) + 1)  # sorted: runs, no np.add.at
        starts = np.flatnonzero(np.diff(owners, prepend=-1))
        counts[owners[starts]] += np.diff(starts, append=len(owners)).astype(np.int32)
        _recount_repeats(maps, codes, keys, counts)
    return CountTable(keys, counts, {}, live=len(keys))


def _recount_repeats(
    maps: Sequence[PackedMap],
    codes: np.ndarray[Any, Any],
    keys: np.ndarray[Any, Any],
    counts: np.ndarray[Any, Any],
) -> None:
    """Count a hash once per map that lists it: a count of 2 or more may be one map
    listing it twice. Only such hashes can repeat, and they are the shared few: their
    occurrences are found through a bitmap of their low bits (one cheap pass over the
    codes) and checked exactly, then counted as distinct (map, hash) pairs."""
    import numpy as np

    many = np.flatnonzero(counts > 1)
    wanted = keys[many]
    bits = max(16, min(24, int(len(wanted)).bit_length() + 8))
    low = np.zeros(1 << bits, dtype=bool)
    low[wanted & ((1 << bits) - 1)] = True
    maybe = np.flatnonzero(low[codes & ((1 << bits) - 1)])
    slot = np.searchsorted(wanted, codes[maybe])
    slot[slot == len(wanted)] = 0
    exact = wanted[slot] == codes[maybe]
    at, slot = maybe[exact], slot[exact]
    lengths = np.fromiter((len(m.codes) >> 3 for m in maps), dtype=np.int64, count=len(maps))
    owner = np.searchsorted(np.cumsum(lengths), at, side="right")
    if len(wanted) * len(maps) <= 1 << 26:  # a bitmap of (hash, map) seen: no sort
        seen = np.zeros((len(wanted), len(maps)), dtype=bool)
        seen[slot, owner] = True
        counts[many] = seen.sum(axis=1)
    else:
        pairs = np.unique(owner * len(wanted) + slot)
        counts[many] = np.bincount(pairs % len(wanted), minlength=len(wanted))


def _dict_count(held: list[Collection[str]]) -> dict[str, int]:
    counts = _table_for(sum(map(len, held)))
    _count_elements(counts, chain.from_iterable(held))
    return counts


def _distinct(hashes: Sequence[str]) -> Collection[str]:
    """The map itself when nothing repeats (the usual case), else its set."""
    # Counting the tuple rather than the set walks the hash strings in the order they were
    # allocated, which keeps the multi-million-entry count cache friendly.
    once = set(hashes)
    return hashes if len(once) == len(hashes) else once


def _table_for(references: int) -> dict[str, int]:
    """An empty dict for counting ``references`` hashes.

    Past ~100k references, one in CPython's general layout, which keeps each key's hash in
    its entry. A dict that has only ever held str keys drops the stored hash, so a probe
    that lands on an occupied slot reads that key's string object to compare hashes: once
    the table outgrows the caches that is one more miss per probe, and at 5M references the
    count took ~30% longer. One non-str key switches the layout for good (resizes keep it).
    A small table stays in the str layout, a few ns faster per lookup while it fits in cache.
    """
    if references < _GENERAL_LAYOUT_FROM:
        return {}
    d: dict[object, int] = {0: 0}
    del d[0]
    return cast(dict[str, int], d)  # empty: only str keys will go in
