"""What the group committer is handed (one applied change, finished), what it hands back
once durable (Committed) or refused by a fence (Fenced), and the ports it tells through."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import AnswerRow


class Reply(ABC):
    """The port an event a record commits is read through: typed data the committer reads
    as it builds the transaction, never a hook it calls afterwards. Subclassed by name
    (pipeline.outcome.Outcome), as Subscriber and CommitMeter are: the commit knows
    nothing above it."""

    __slots__ = ()

    @abstractmethod
    def answer(self) -> AnswerRow | None:
        """The event_id answer stored with the change, the reply made final now (None:
        no event_id)."""


@dataclass(frozen=True, slots=True, eq=False)
class ChangeRecord:
    """One applied change of ``namespace``: what to write, the evictions to register, the
    events it commits; the committer writes it and tells its subscribers (Committed).

    Attributes:
        namespace: the namespace whose manager applied it.
        change: the change itself (its undo record; reads answer from committed state
            by taking it out while it is in doubt).
        manager: undoes it if the commit fails.
        sessions: session id -> its state to store (None: delete the row), as applied.
        forks: fork id -> the open fork to store (None: it ended).
        evict_delete / evict_demote / evict_cold: the evictions its outbox row holds.
        kept: chunks a keep was asked for because it referenced them again (evicted
            again if it is rolled back).
        replies: the events it commits, in apply order: each one's event_id answer is
            read as the transaction is built (the reply is final then), and the Committed
            subscribers publish their trace records (none: nothing to publish).
        gate: the cache's answer to a keep it needs (or its evict's deadline): the
            commit waits for it.
        ready: what completes its reply (a debug file): the commit waits for it a while.
    """

    namespace: str
    change: Change
    manager: SessionManager
    sessions: Mapping[str, Session | None]
    forks: Mapping[int, Fork | None]
    evict_delete: Sequence[str]
    evict_demote: Sequence[str]
    kept: Sequence[str] = ()
    replies: Sequence[Reply] = ()
    gate: asyncio.Future[None] | None = None
    ready: asyncio.Future[bool] | None = None
    evict_cold: Sequence[str] = ()

    @classmethod
    def of(
        cls,
        namespace: str,
        change: Change,
        manager: SessionManager,
        *,
        kept: Sequence[str] = (),
        replies: Sequence[Reply] = (),
        gate: asyncio.Future[None] | None = None,
        ready: asyncio.Future[bool] | None = None,
    ) -> ChangeRecord:
        """The record of ``change`` just applied by ``manager``: the rows it moved, as
        they stand now (taken before any await, so they are this change's)."""
        live, forks = manager.sessions, manager.forks
        return cls(
            namespace,
            change,
            manager,
            {sid: live.get(sid) for sid in change.prev_sessions},
            {fid: forks.get(fid) for fid in change.prev_forks},
            # Not copied: the core never touches a change's lists after returning it.
            change.evict_delete,
            change.evict_demote,
            tuple(kept),
            replies,
            gate,
            ready,
            change.evict_cold,
        )

    @property
    def evicts(self) -> bool:
        """True when its evictions need an outbox row."""
        return bool(self.evict_delete or self.evict_demote or self.evict_cold)


@dataclass(frozen=True, slots=True)
class Committed:
    """A batch made durable, told to the committer's subscribers before any of its waiters
    resumes: the records in apply order and namespace -> the outbox row holding that
    namespace's evictions of the batch."""

    records: Sequence[ChangeRecord]
    rows: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Fenced:
    """A commit refused by the store's fence (nothing written, every change undone): the
    sessions another node changed since this node read them; told before any waiter
    resumes."""

    sessions: tuple[str, ...]


class Subscriber:
    """The port a commit tells through (the committer knows nothing above it; the
    composition root gives it the concrete ones: the ledger, the trace records, ownership's
    notices). Each is told before any waiter of the batch resumes; a subscriber overrides
    what it listens to (the rest are told nothing)."""

    __slots__ = ()

    def on_committed(self, c: Committed) -> None:
        """A batch made durable."""

    def on_fenced(self, f: Fenced) -> None:
        """A commit refused by the store's fence."""


class CommitMeter:
    """The port a commit's cost is told through (the composition root gives the committer
    the daemon's metrics; the committer knows nothing above it). Told after each durable
    batch, before its subscribers."""

    __slots__ = ()

    def commit(self, seconds: float, batch: int) -> None:
        """One group commit: how long its store transaction took, and its records."""
