"""The refcounts and parked table from first principles (the tests' oracle)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session


def recompute_refcounts(sessions: Iterable[Session], forks: Iterable[Fork] = ()) -> dict[str, int]:
    """Refcounts from first principles: each active map's unique hashes + every fork hold."""
    counts: Counter[str] = Counter()
    for s in sessions:
        # Counter.update over an iterable counts in C; this runs over every stored
        # reference at start-up.
        counts.update(s.held_hashes())
    for fork in forks:
        counts.update(fork.hashes)
    # A Counter is a dict: handing it over as is saves copying millions of entries.
    return counts


def recompute_parked(sessions: Iterable[Session]) -> dict[str, int]:
    """hash -> number of suspended sessions whose map contains it."""
    counts: Counter[str] = Counter()
    for s in sessions:
        if s.suspended:
            counts.update(set(s.chunk_hashes))
    return dict(counts)
