"""The committed outbox as delivery reads it: rows made durable, changes still in doubt."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ramakv_daemon.commit.record import Subscriber
from ramakv_daemon.ports import CommittedRow, Unkept

if TYPE_CHECKING:
    from ramakv_daemon.commit.record import ChangeRecord, Committed


class OutboxLedger(Subscriber):
    """What the group committer leaves for delivery, and what delivery leaves for it.

    The committer writes here and never calls delivery: which changes are in doubt, the
    keeps a rolled-back change asked for, and (the ledger subscribes to its Committed)
    the committed rows, whole, each in one piece (delivering some entries cannot retire a
    row whose others are unseen). Each
    namespace's delivery takes its items (in commit order) and asks what is in doubt; the
    rows it has retired wait here for the committer's next transaction. Implements
    :class:`ramakv_daemon.ports.OutboxFeed`.
    """

    def __init__(self) -> None:
        self._items: dict[str, list[CommittedRow | Unkept]] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        # id(record) -> (namespace, refcounts before) of every submitted change not yet
        # committed or rolled back. Not a queue: a change held for a keep commits after
        # later ones (commit/holding.py); a failure ends them all.
        self._doubt: dict[int, tuple[str, Mapping[str, int]]] = {}
        self._retired: list[int] = []
        # The group writer waits on it (its own submits set it too): rows were retired.
        self.writer_wake = asyncio.Event()

    # ---- the committer's side ------------------------------------------------------------
    def submitted(self, record: ChangeRecord) -> None:
        """``record``'s change (moving its refcounts) waits for its commit."""
        self._doubt[id(record)] = (record.namespace, record.change.prev_counts)

    def on_committed(self, c: Committed) -> None:
        """A batch is durable (the committer's first Subscriber, always): every row
        whole, then its changes leave the doubt."""
        rows = c.rows
        for r in c.records:
            if r.evicts:
                ns = r.namespace
                self.committed(
                    ns, CommittedRow(rows[ns], r.evict_delete, r.evict_demote, r.evict_cold)
                )
        self.settled(c.records)

    def committed(self, namespace: str, row: CommittedRow | Unkept) -> None:
        """``row`` is durable: ``namespace``'s delivery takes it."""
        self._items.setdefault(namespace, []).append(row)
        wake = self._wakes.get(namespace)
        if wake is not None:
            wake.set()

    def settled(self, records: Iterable[ChangeRecord]) -> None:
        """These changes in doubt are committed."""
        doubt = self._doubt
        for r in records:
            doubt.pop(id(r), None)

    def failed(self, unkept: Mapping[str, list[str]]) -> None:
        """Every change in doubt was rolled back (and the rows retired since the last
        commit dropped with that batch); ``unkept``: namespace -> chunks kept for them."""
        self._doubt.clear()
        self._retired = []
        for namespace, kept in unkept.items():
            if kept:
                self.committed(namespace, Unkept(tuple(kept)))

    def take_retired(self) -> list[int]:
        """Rows none of whose entries waits any more: deleted in the next transaction."""
        rows, self._retired = self._retired, []
        return rows

    @property
    def has_retired(self) -> bool:
        return bool(self._retired)

    # ---- delivery's side (ports.OutboxFeed) ----------------------------------------------
    def subscribe(self, namespace: str, wake: asyncio.Event) -> None:
        """Set ``wake`` whenever ``namespace`` gets an item."""
        self._wakes[namespace] = wake
        if self._items.get(namespace):
            wake.set()

    def take(self, namespace: str) -> list[CommittedRow | Unkept]:
        """``namespace``'s items since the last take, in commit order."""
        items = self._items.get(namespace)
        if not items:
            return []
        self._items[namespace] = []
        return items

    def in_doubt(self, namespace: str, hashes: list[str]) -> set[str]:
        """Those of ``hashes`` whose refcount an uncommitted change of ``namespace``
        moved: their committed count is not known yet (that change may be rolled back)."""
        if not self._doubt:
            return set()
        changes = [counts for ns, counts in self._doubt.values() if ns == namespace]
        if not changes:
            return set()
        wanted = set(hashes)
        out: set[str] = set()
        for counts in changes:
            if len(counts) < len(wanted):
                out.update(h for h in counts if h in wanted)
            else:
                out.update(h for h in wanted if h in counts)
        return out

    def retire(self, row_ids: list[int]) -> None:
        """Rows none of whose entries waits any more: the committer deletes them."""
        if row_ids:
            self._retired.extend(row_ids)
            self.writer_wake.set()
