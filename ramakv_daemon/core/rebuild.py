"""Start-up rebuild of the refcount and parked tables from millions of stored references."""

from __future__ import annotations

from collections import _count_elements  # type: ignore[attr-defined]
from collections.abc import Iterable
from itertools import chain

from ramakv_daemon.core.session import Session


def refcounts(sessions: Iterable[Session]) -> dict[str, int]:
    """Same table as :func:`~ramakv_daemon.core.manager.recompute_refcounts`: each
    non-suspended map's distinct hashes once, plus every fork hold's hashes."""
    held: list[Iterable[str]] = []
    for s in sessions:
        if not s.suspended:
            held.append(_distinct(s.chunk_hashes))
        held.extend(s.fork_holds)
    counts = _hash_storing_dict()
    _count_elements(counts, chain.from_iterable(held))
    return counts


def parked(sessions: Iterable[Session]) -> dict[str, int]:
    """Same table as :func:`~ramakv_daemon.core.manager.recompute_parked`: hash -> number
    of suspended sessions whose map lists it."""
    counts = _hash_storing_dict()
    suspended = (s.chunk_hashes for s in sessions if s.suspended)
    _count_elements(counts, chain.from_iterable(map(_distinct, suspended)))
    return counts


def _distinct(hashes: tuple[str, ...]) -> Iterable[str]:
    """The map itself when nothing repeats (the usual case), else its set."""
    # Counting the tuple rather than the set walks the hash strings in the order they were
    # allocated, which keeps the multi-million-entry count cache friendly.
    once = set(hashes)
    return hashes if len(once) == len(hashes) else once


def _hash_storing_dict() -> dict[str, int]:
    """An empty dict in CPython's general layout, which keeps each key's hash in its entry.

    A dict that has only ever held str keys drops the stored hash, so each probe that lands
    on an occupied slot reads that key's string object to compare hashes: with 4M+ keys
    that is one more cache miss per probe and made the start-up count ~30% slower. One
    non-str key switches the layout for good (resizes keep it); the lookups, values and
    semantics are those of any dict.
    """
    d: dict[object, int] = {0: 0}
    del d[0]
    return d  # type: ignore[return-value]
