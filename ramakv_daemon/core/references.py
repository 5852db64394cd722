"""Taking and dropping references: the refcounts, the parked table of suspended maps, and
what a chunk nobody names any more leaves (deleted on evidence, else ordered cold)."""

from __future__ import annotations

from collections.abc import Sequence

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.last_refs import LastRefs
from ramakv_daemon.core.refcount import Counts, RefcountTable, add_each, counts_of, take_each


class References:
    """The reference steps, mixed into core.manager.SessionManager, which has every
    attribute declared here."""

    refcounts: RefcountTable
    parked: Counts
    last_refs: LastRefs

    def _park(
        self,
        change: Change,
        hashes: Sequence[str],
        step: int,
        sid: str = "",
        now: float = 0.0,
        codes: bytes | None = None,
    ) -> None:
        """Park ``hashes`` (``step`` +1: a map is suspended) or take them out (-1: a
        suspended map resumes or goes); the evidence follows: a parked chunk is named, one
        that leaves the table and nothing holds was released now (``codes``: see
        RefcountTable.decr)."""
        parked, counts, refs = self.parked, self.refcounts.counts, self.last_refs
        get, remember = parked.get, change.prev_parked.setdefault
        if step > 0:
            refs.named(hashes)
            add_each(parked, hashes, remember, codes)
            return
        olds = take_each(parked, hashes, change.prev_parked, codes)  # in bulk, or:
        if olds is None:
            olds = []
            for h in hashes:
                old = get(h, 0)
                remember(h, old)
                if old == 1:
                    del parked[h]
                else:
                    parked[h] = old - 1
                olds.append(old)
        both = list(zip(hashes, olds, counts_of(counts, hashes), strict=True))
        refs.holding([h for h, old, held in both if old >= 2 or held], now)
        refs.released_now([h for h, old, held in both if old == 1 and not held], sid, now)

    def _reference(
        self, change: Change, hashes: Sequence[str], sid: str | None = None, now: float = 0.0
    ) -> None:
        """``sid`` takes up ``hashes`` (None: a fork hold of what its session holds)."""
        if sid is not None:
            self.last_refs.referenced(hashes, sid, now, self.refcounts.counts, self.parked)
        self.refcounts.incr(hashes, change.prev_counts)

    def _release(
        self,
        change: Change,
        hashes: Sequence[str],
        sid: str,
        now: float,
        *,
        declared: bool = False,
        codes: bytes | None = None,
        parked: bool = False,
    ) -> None:
        """``parked``: every hash was just parked (a suspend's): none of its zeros is free."""
        table = self.refcounts
        if self.last_refs.window_s > 0 and table.shared:
            self.last_refs.holding(table.shared.intersection(hashes), now)
        zeros = table.decr(hashes, change.prev_counts, codes)
        if zeros:
            self._unnamed(change, zeros, sid, now, declared, () if parked else None)

    def _unnamed(
        self,
        change: Change,
        zeros: Sequence[str],
        sid: str,
        now: float,
        declared: bool,
        free: Sequence[str] | None = None,
    ) -> None:
        """Chunks no live map or fork references any more (``free``: those no suspended map
        names either; None: found here): deleted when the host declared it and nothing
        says they may be wanted, else ordered cold (never deleted on a guess; the
        retention sweep deletes them once dead past the window)."""
        refs, parked = self.last_refs, self.parked
        if free is None:
            free = [h for h in zeros if h not in parked] if parked else zeros
        if declared:
            gone = refs.unshared(free, now)
            if len(gone) == len(zeros):
                change.evict_delete.extend(gone)
                refs.forget(gone)
                return
            dead = set(gone)
            change.evict_delete.extend(gone)
            refs.forget(gone)
            zeros = [h for h in zeros if h not in dead]
            free = [h for h in free if h not in dead]
        change.evict_cold.extend(zeros)
        refs.released_now(free, sid, now)
