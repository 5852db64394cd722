"""Ports: the protocols through which the service carries out the core's effects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session


class EvictMode(StrEnum):
    """Why a chunk leaves the cache; the backend maps it to tiers."""

    DELETE = "delete"  # no live session references it: drop it from every tier
    DEMOTE = "demote"  # its session was suspended: drop it from DDR, keep it on disk


@dataclass(frozen=True, slots=True)
class BackendResult:
    """What one backend call achieved.

    Attributes:
        ok: True when the backend accepted the request (HTTP 2xx and a valid body).
        status: HTTP status, or 0 when no answer came (connection refused, timeout).
        detail: a short human-readable reason when not ok.
        body: the decoded JSON answer, when there was one.
    """

    ok: bool
    status: int = 0
    detail: str = ""
    body: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ChunkLocations:
    """Where the backend says each chunk lives: hash -> list of tier names."""

    locations: dict[str, list[str]] = field(default_factory=dict)


class Backend(Protocol):
    """The KV cache the daemon steers (LMCache's memory API, or a no-op)."""

    name: str

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        """Ask the cache to bring chunks up to DDR ahead of use.

        Args:
            chunk_hashes: hashes in the order the session will reuse them.
            tag: a label for logs, e.g. ``turn_prefetch_<session_id>``.
        Returns:
            BackendResult; never raises for network or server errors.
        """
        ...

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        """Remove chunks from the cache.

        Args:
            chunk_hashes: hashes whose global refcount reached 0.
            mode: DELETE (every tier) or DEMOTE (DDR only, keep on disk).
        Returns:
            BackendResult; never raises for network or server errors.
        """
        ...

    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        """Ask where chunks are.

        Returns:
            The call's result and hash -> tier names (empty when unknown).
        """
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class StoreError(Exception):
    """Persisting a change failed (disk full, read-only database, I/O error)."""


class SessionStore(Protocol):
    """Durable home of every session's map, turn count and suspension, and of open forks."""

    async def open(self) -> None:
        """Create or migrate the schema.

        Raises:
            StoreError: the database cannot be opened or created.
        """
        ...

    async def load_all(self) -> list[Session]:
        """Every stored session (corrupt rows are skipped and logged)."""
        ...

    async def load_forks(self) -> tuple[list[Fork], int]:
        """Every open fork, oldest first, and the next fork id to hand out (never below
        one already given, even when that fork has ended)."""
        ...

    async def load_outbox(self) -> list[tuple[int, str, list[tuple[str, str]]]]:
        """Evictions acknowledged but not yet confirmed by the backend, as stored rows
        (row id, namespace, [(hash, mode)]) in commit order."""
        ...

    async def load_event_ids(self, limit: int) -> list[tuple[str, str, str]]:
        """The newest remembered answers to idempotent events, oldest first:
        (event_id, response JSON, digest of the request)."""
        ...

    async def write(
        self,
        sessions: dict[str, Session | None],
        outbox_add: list[tuple[int, str, list[tuple[str, str]]]] | None = None,
        outbox_done: list[int] | None = None,
        event_ids: list[tuple[str, str, float, str]] | None = None,
        prune_event_ids_before: float | None = None,
        forks: dict[int, Fork | None] | None = None,
        next_fork_id: int | None = None,
    ) -> None:
        """Apply everything in one transaction.

        Args:
            sessions: session id -> new state, or None to delete the session.
            outbox_add: new outbox rows (row id, namespace, [(hash, mode)]).
            outbox_done: ids of outbox rows none of whose entries waits any more.
            event_ids: (event_id, response JSON, timestamp, request digest) answers to
                remember.
            prune_event_ids_before: forget answers older than this timestamp.
            forks: fork id -> open fork, or None when it ended.
            next_fork_id: the counter's new value (stored only if higher).
        Raises:
            StoreError: nothing was written.
        """
        ...

    async def close(self) -> None:
        """Flush and close."""
        ...
