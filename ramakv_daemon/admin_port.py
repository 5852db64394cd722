"""The operator's part of the store port (ramakv-admin): what it reads, plans and closes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import NamedTuple

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import EvictMode


class PendingEviction(NamedTuple):
    """An eviction waiting in the outbox, as the operator sees it."""

    namespace: str
    chunk_hash: str
    mode: EvictMode


@dataclass(frozen=True, slots=True)
class AdminView:
    """Everything in a store, whoever owns it.

    Attributes:
        sessions: every stored session (corrupt rows skipped, as a daemon's load would).
        forks: every open fork.
        outbox: every eviction waiting for delivery.
        owners: sessions per owner node, or None for a store one daemon has to itself.
        fork_holders: fork id -> the node whose memory holds its references (only there
            can it end); empty for a store one daemon has to itself.
    """

    sessions: list[Session]
    forks: list[Fork]
    outbox: list[PendingEviction]
    owners: dict[str, int] | None = None
    fork_holders: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Cleanup:
    """An explicit clean-up, decided by the pure core the way the daemon's events would.

    Attributes:
        sessions: the sessions to close, as they were read (a shared store leaves one
            that an event reached since).
        forks: the forks to end too (a namespace purge).
        evict: namespace -> chunk hash -> mode: the evictions that follow.
    """

    sessions: list[Session]
    evict: dict[str, dict[str, EvictMode]]
    forks: list[Fork] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class CleanupDone:
    """What a clean-up changed.

    Attributes:
        closed: session id -> the owner node told to release it (None when no daemon
            holds it: the store itself was changed and its evictions queued).
        left: planned sessions left as they are (an event reached them since, or gone).
        forks_kept: planned forks not ended: fork id -> the node that holds it.
    """

    closed: dict[str, str | None]
    left: list[str] = field(default_factory=list)
    forks_kept: dict[int, str] = field(default_factory=dict)


class StoreAdmin(ABC):
    """The operator's access to a store: reports and explicit clean-ups, never automatic.

    Opening an admin never creates or migrates a store. A store one daemon has to itself
    (``shared`` False) is changed only while no daemon holds it; a shared one (several
    daemons, each owning its rows) is changed beside them, and owners are told.
    """

    @property
    @abstractmethod
    def shown(self) -> str:
        """The store as named to the operator (a URL without its password)."""

    @property
    @abstractmethod
    def shared(self) -> bool:
        """True when daemons work on the store beside this tool (clean-ups are handed to
        the owner nodes instead of being refused while they run)."""

    @abstractmethod
    async def open(self) -> None:
        """Connect to an existing store.

        Raises:
            StoreNotFound: there is no store there.
            StoreError: it cannot be opened.
        """

    @abstractmethod
    async def read(self) -> AdminView:
        """Everything stored, whoever owns it.

        Returns:
            The view; reading never changes the store.
        Raises:
            StoreError: the store cannot be read.
        """

    @abstractmethod
    def holder(self) -> str | None:
        """Who holds the store exclusively now.

        Returns:
            "pid 123 (ram-a-kv)" while a daemon has it open, None when nobody does (and
            always None for a shared store).
        """

    def lock_token(self) -> str:
        """The token of the hold on the store's lock now ("" when nobody holds it, or
        for a shared store): the holding daemon says the same in ``GET /healthz``."""
        return ""

    @abstractmethod
    async def close_sessions(self, cleanup: Cleanup) -> CleanupDone:
        """Carry out a clean-up in one transaction per store (per session when shared).

        Args:
            cleanup: the sessions to close, forks to end and evictions to queue.
        Returns:
            What was changed.
        Raises:
            StoreInUse: a daemon holds the store; nothing was changed.
            StoreError: nothing was changed.
        """

    @abstractmethod
    def vacuum_plan(self) -> str:
        """What :meth:`vacuum` would do, in one line for a dry run."""

    @abstractmethod
    async def vacuum(self) -> None:
        """Give back the space of deleted rows.

        Raises:
            StoreInUse: a daemon holds the store; nothing was done.
            StoreError: it failed.
        """

    @abstractmethod
    async def close(self) -> None:
        """Release connections (idempotent)."""
