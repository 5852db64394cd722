"""What eviction delivery may read of the rest of the daemon: one namespace's live
references and the committed outbox (ports.OutboxFeed), and nothing more."""

from __future__ import annotations

import asyncio
from collections.abc import Container, Mapping
from typing import Protocol

from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.refcount import counted
from ramakv_daemon.ports import CommittedRow, OutboxFeed, Unkept


class DeliveryState(Protocol):
    """The narrow view a :class:`~ramakv_daemon.delivery.dispatcher.BackendDispatcher` gets."""

    @property
    def namespace(self) -> str:
        """The namespace whose evictions are delivered."""
        ...

    def references(self) -> Mapping[str, int]:
        """hash -> live refcount (read only): a chunk in it is referenced."""
        ...

    def referenced(self, hashes: list[str]) -> list[str]:
        """Those of ``hashes`` with a live refcount, in order (read at once: a delivery
        pass checks every chunk it is about to send)."""
        ...

    def parked(self) -> Container[str]:
        """Chunks a suspended session's stored map lists (demoted, not deleted)."""
        ...

    def subscribe(self, wake: asyncio.Event) -> None:
        """Set ``wake`` whenever committed items arrive."""
        ...

    def committed(self) -> list[CommittedRow | Unkept]:
        """The items committed since the last call, in commit order."""
        ...

    def in_doubt(self, hashes: list[str]) -> set[str]:
        """Those of ``hashes`` whose refcount an uncommitted change moved."""
        ...

    def forget_rows(self, rows: list[int]) -> None:
        """Delete stored outbox rows none of whose entries waits any more."""
        ...


class NamespaceState:
    """:class:`DeliveryState` of one namespace: its manager and the committed outbox."""

    __slots__ = ("_feed", "_manager")

    def __init__(self, manager: SessionManager, feed: OutboxFeed) -> None:
        self._manager = manager
        self._feed = feed

    @property
    def namespace(self) -> str:
        return self._manager.namespace

    def references(self) -> Mapping[str, int]:
        return self._manager.refcounts.counts

    def referenced(self, hashes: list[str]) -> list[str]:
        return counted(self._manager.refcounts.counts, hashes)

    def parked(self) -> Container[str]:
        return self._manager.parked

    def subscribe(self, wake: asyncio.Event) -> None:
        self._feed.subscribe(self._manager.namespace, wake)

    def committed(self) -> list[CommittedRow | Unkept]:
        return self._feed.take(self._manager.namespace)

    def in_doubt(self, hashes: list[str]) -> set[str]:
        return self._feed.in_doubt(self._manager.namespace, hashes)

    def forget_rows(self, rows: list[int]) -> None:
        self._feed.retire(rows)
