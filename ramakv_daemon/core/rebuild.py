"""Start-up rebuild of the refcount and parked tables from millions of stored references."""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection, Iterable
from itertools import chain
from typing import cast

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session

# Counter.update's counting loop (C in CPython; typeshed does not list this private helper):
# it counts into any dict, here the one _table_for picked.
_count_elements: Callable[[dict[str, int], Iterable[str]], None] = vars(collections)[
    "_count_elements"
]

# References from which the count's table takes the hash-storing layout (see _table_for).
_GENERAL_LAYOUT_FROM = 1 << 17


def refcounts(sessions: Iterable[Session], forks: Iterable[Fork] = ()) -> dict[str, int]:
    """Same table as :func:`~ramakv_daemon.core.manager.recompute_refcounts`: each
    non-suspended map's distinct hashes once, plus every open fork's hashes."""
    held: list[Collection[str]] = []
    for s in sessions:
        if not s.suspended:
            held.append(_distinct(s.chunk_hashes))
    held.extend(f.hashes for f in forks)
    counts = _table_for(sum(map(len, held)))
    _count_elements(counts, chain.from_iterable(held))
    return counts


def parked(sessions: Iterable[Session]) -> dict[str, int]:
    """Same table as :func:`~ramakv_daemon.core.manager.recompute_parked`: hash -> number
    of suspended sessions whose map lists it."""
    suspended = [_distinct(s.chunk_hashes) for s in sessions if s.suspended]
    counts = _table_for(sum(map(len, suspended)))
    _count_elements(counts, chain.from_iterable(suspended))
    return counts


def _distinct(hashes: tuple[str, ...]) -> Collection[str]:
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
