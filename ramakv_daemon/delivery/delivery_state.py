"""What eviction delivery may ask of the rest of the daemon: one namespace's live
references and the commits still in doubt, and nothing more."""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Protocol

from ramakv_daemon.core.manager import SessionManager


class DeliveryState(Protocol):
    """The narrow view a :class:`~ramakv_daemon.delivery.dispatcher.BackendDispatcher` gets."""

    @property
    def namespace(self) -> str:
        """The namespace whose evictions are delivered."""
        ...

    def references(self) -> Mapping[str, int]:
        """hash -> live refcount (read only): a chunk in it is referenced."""
        ...

    def parked(self) -> Container[str]:
        """Chunks a suspended session's stored map lists (demoted, not deleted)."""
        ...

    def in_doubt(self, hashes: list[str]) -> set[str]:
        """Those of ``hashes`` whose refcount an uncommitted change moved."""
        ...

    def forget_rows(self, rows: list[int]) -> None:
        """Delete stored outbox rows none of whose entries waits any more."""
        ...


class Commits(Protocol):
    """The group committer as delivery sees it."""

    def touched(self, namespace: str, hashes: list[str]) -> set[str]: ...

    def forget_rows(self, row_ids: list[int]) -> None: ...


class NamespaceState:
    """:class:`DeliveryState` of one namespace: its manager and the group committer."""

    __slots__ = ("_commits", "_manager")

    def __init__(self, manager: SessionManager, commits: Commits) -> None:
        self._manager = manager
        self._commits = commits

    @property
    def namespace(self) -> str:
        return self._manager.namespace

    def references(self) -> Mapping[str, int]:
        return self._manager.refcounts.counts

    def parked(self) -> Container[str]:
        return self._manager.parked

    def in_doubt(self, hashes: list[str]) -> set[str]:
        return self._commits.touched(self._manager.namespace, hashes)

    def forget_rows(self, rows: list[int]) -> None:
        self._commits.forget_rows(rows)
