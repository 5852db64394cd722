"""Operator eviction (chunk_evict): free chunks are deleted at once; referenced ones only
with force, their holders' maps and fork holds dropping them first."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ramakv_daemon.core.change import Change, as_data
from ramakv_daemon.core.fork import Fork, ForkBook
from ramakv_daemon.core.last_refs import LastRefs
from ramakv_daemon.core.refcount import Counts, RefcountTable
from ramakv_daemon.core.session import Session, unique

if TYPE_CHECKING:  # the reply's shape, checked by mypy; the core imports no protocol
    from ramakv_protocol.replies import ChunkEvictData


class OperatorEvict(ABC):
    """The operator's eviction, mixed into core.manager.SessionManager, which has every
    attribute declared here and implements the abstract helpers it calls."""

    sessions: dict[str, Session]
    forks: ForkBook
    refcounts: RefcountTable
    parked: Counts
    last_refs: LastRefs

    @abstractmethod
    def holders_of(
        self, hashes: Iterable[str], *, with_suspended: bool = False
    ) -> dict[str, list[str]]: ...

    @abstractmethod
    def _put(self, change: Change, session: Session) -> None: ...

    @abstractmethod
    def _put_fork(self, change: Change, fork: Fork) -> None: ...

    @abstractmethod
    def _park(
        self, change: Change, hashes: Sequence[str], step: int, sid: str = "", now: float = 0.0
    ) -> None: ...

    @abstractmethod
    def _release(
        self, change: Change, hashes: Sequence[str], sid: str, now: float, *, declared: bool = False
    ) -> None: ...

    def chunk_evict(
        self,
        hashes: Sequence[str],
        *,
        force: bool = False,
        dry_run: bool = False,
        now: float = 0.0,
    ) -> Change:
        """Operator eviction: free chunks go at once; referenced ones only with ``force``.

        Without force, a referenced chunk is refused and its holders reported. With
        force, the holders' maps and fork holds drop the chunk first (the chunk then
        reaches 0 and is deleted from every tier). ``dry_run`` changes nothing.
        """
        wanted = unique(tuple(hashes))
        holders = self.holders_of(
            (h for h in wanted if h in self.refcounts or h in self.parked), with_suspended=True
        )
        refused = {h: sids for h, sids in holders.items() if sids}
        free = [h for h in wanted if h not in refused]
        released: dict[str, list[str]] = {}
        if force:
            for h, sids in refused.items():
                for sid in sids:
                    released.setdefault(sid, []).append(h)
        change = Change(durable=force and bool(released) and not dry_run)
        evicted = list(free) + ([h for h in wanted if h in refused] if force else [])
        if not dry_run:
            for sid, dropped in released.items():
                self._force_release(change, sid, set(dropped), now)
            # The operator asked for these gone from every tier, parked or not.
            forced = set(refused) if force else set()
            change.evict_delete.extend(h for h in change.evict_cold if h in forced)
            change.evict_cold[:] = [h for h in change.evict_cold if h not in forced]
            change.evict_delete.extend(free)
            self.last_refs.forget(change.evict_delete)
        data: ChunkEvictData = {
            "dry_run": dry_run,
            "force": force,
            "evicted": evicted,
            "refused": {} if force else refused,
            "released": {sid: sorted(h) for sid, h in released.items()},
        }
        change.data = as_data(data)
        return change

    def _force_release(
        self, change: Change, session_id: str, dropped: set[str], now: float
    ) -> None:
        """Take ``dropped`` out of a session's map and forks, releasing references (the
        session may be closed, holding only through its forks)."""
        for fork in self.forks.of(session_id):
            gone = [h for h in fork.hashes if h in dropped]
            if gone:
                self._release(change, gone, session_id, now)
                kept = tuple(h for h in fork.hashes if h not in dropped)
                self._put_fork(
                    change,
                    Fork(fork.fork_id, fork.session_id, kept, fork.created_ts, fork.namespace),
                )
        session = self.sessions.get(session_id)
        if session is None:
            return
        mine = [h for h in session.unique_hashes() if h in dropped]
        if session.suspended:
            self._park(change, mine, -1, session_id, now)
        else:
            self._release(change, mine, session_id, now)
        self._put(
            change,
            session.evolve(
                chunk_hashes=tuple(h for h in session.chunk_hashes if h not in dropped),
                last_event_ts=now,
            ),
        )
