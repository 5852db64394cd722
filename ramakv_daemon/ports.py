"""Ports: the protocols through which the service carries out the core's effects."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, NamedTuple, Protocol, runtime_checkable

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session


class EvictMode(StrEnum):
    """Why a chunk leaves the cache; the backend maps it to tiers."""

    DELETE = "delete"  # no live session references it: drop it from every tier
    DEMOTE = "demote"  # its session was suspended: drop it from DDR, keep it on disk
    # No longer named, not dead yet: an order hint (the cold end of the cache's eviction
    # order: evicted first, still hit while there is room); DEMOTE where the cache has no
    # order route. Nothing is removed, so a wrong guess costs nothing.
    COLD = "cold"


#: Where an order hint moves chunks in the cache's eviction order.
OrderPosition = Literal["cold", "warm"]


_MODES = {m.value: m for m in EvictMode}


def mode_of(text: str) -> EvictMode | None:
    """The mode a stored string names, or None for one this version does not know."""
    return _MODES.get(text)


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
    body: JsonObject | None = None  # decoded JSON: its shape is the backend's


@dataclass(frozen=True, slots=True)
class ChunkLocations:
    """Where the backend says each chunk lives: hash -> list of tier names."""

    locations: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EvictRequest:
    """One evict call as its body is written: the chunks still deliverable at that moment.

    Attributes:
        chunk_hashes: the chunks to evict (checked again just before the write).
        mode: DELETE (every tier) or DEMOTE (DDR only, keep on disk; also COLD's where the
            cache has no order route).
        generation: the eviction window's generation at the write (wall clock ns): a keep
            of a newer generation cancels this delete in a deferring cache.
        defer_s: how long a deferring cache waits before it deletes (0: at once; the
            deferral fields are then not sent).
        not_after_ns: the wall-clock deadline (ns) past which the cache must not act on
            this delete any more (sent with a deferral only).
    """

    chunk_hashes: list[str]
    mode: EvictMode
    generation: int = 0
    defer_s: float = 0.0
    not_after_ns: int = 0

    @property
    def deferred(self) -> bool:
        """True when the cache is asked to defer the delete (the deferral fields go out)."""
        return self.defer_s > 0


class SentEvict(NamedTuple):
    """What a checked evict did: the call's result, the request as written (None when
    nothing was left to send) and the monotonic time it was decided."""

    result: BackendResult
    request: EvictRequest | None
    wrote_at: float


# Run by the backend as an evict's body is written (the connection is ready): the
# request with the chunks still deliverable then; its chunk list may be empty.
WriteCheck = Callable[[list[str]], EvictRequest]


class Backend(ABC):
    """The KV cache the daemon steers (LMCache's memory API, or a no-op); every adapter
    and test fake subclasses it. Methods never raise for network or server errors."""

    name: str = "backend"
    # True when the cache knows keeps (ascend_ext's memory API): a chunk referenced again
    # inside its eviction window is then kept; False: nothing is sent, keeps are moot.
    takes_keeps: bool = False

    async def start(self) -> object:
        """Probe the cache once at daemon start (its routes and capabilities), logging
        what is missing; the default probes nothing."""
        return None

    @abstractmethod
    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        """Ask the cache to bring chunks up to DDR ahead of use.

        Args:
            chunk_hashes: hashes in the order the session will reuse them.
            tag: the prefetch's name, ``prefetch_<session_id>:<n>`` (one per prefetch,
                the same for each of its parts): the cache's lookup_id, a cancel names it.
        Returns:
            BackendResult; never raises for network or server errors.
        """

    @abstractmethod
    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        """Remove chunks from the cache (budget demotions: no recheck, no deferral).

        Args:
            chunk_hashes: hashes to evict.
            mode: DELETE (every tier) or DEMOTE (DDR only, keep on disk).
        Returns:
            BackendResult; never raises for network or server errors.
        """

    async def evict_checked(
        self, chunk_hashes: Sequence[str], mode: EvictMode, at_write: WriteCheck
    ) -> SentEvict:
        """An outbox evict whose request is decided at the moment its body is written.

        ``at_write`` runs when the body goes out, so a chunk referenced again while the
        call waited for a connection is not in it; nothing is sent when no chunk is left.
        This default decides first and then calls :meth:`evict` (a cache that acts inline
        needs no more); an adapter that streams its body decides as it writes it.
        """
        request = at_write(list(chunk_hashes))
        wrote_at = time.monotonic()
        if not request.chunk_hashes:
            return SentEvict(BackendResult(True), None, wrote_at)
        return SentEvict(await self.evict(request.chunk_hashes, mode), request, wrote_at)

    async def keep(self, chunk_hashes: Sequence[str], generation: int) -> BackendResult:
        """Cancel deferred deletes of these chunks older than ``generation`` (only called
        when :attr:`takes_keeps`); an empty list asks whether the cache honours deadlines
        (its answer's ``expires``). The default knows no keeps: a 404, as a stock cache."""
        return BackendResult(False, 404, f"{self.name} knows no keeps")

    async def order(self, chunk_hashes: Sequence[str], position: OrderPosition) -> BackendResult:
        """Move chunks to the cold (evicted first) or warm end of the cache's eviction order;
        nothing is removed. The default knows no order: a 404, as a stock cache (delivery
        then demotes what it would have ordered cold)."""
        return BackendResult(False, 404, f"{self.name} knows no order hints")

    async def cancel_prefetch(self, tag: str) -> BackendResult:
        """Stop the cache's prefetch ``tag`` before its next chunk (its request was
        served); the answer's body says how many it stopped (``cancelled``) and the chunks
        they skip (``skipped``). The default knows no cancel: a 404, as a stock cache (the
        daemon then sends no more)."""
        return BackendResult(False, 404, f"{self.name} knows no prefetch cancel")

    @abstractmethod
    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        """Ask where chunks are.

        Returns:
            The call's result and hash -> tier names (empty when unknown).
        """

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""


# Builds a deployment's own backend: (lmcache_url, evict_locations) -> Backend.
BackendFactory = Callable[[str, tuple[str, ...]], Backend]


# ---- the committed outbox, as delivery reads it ------------------------------------------
class CommittedRow(NamedTuple):
    """Evictions a commit made durable, all of one stored outbox row (0: none stored, best
    effort), for one namespace."""

    row_id: int
    delete: Sequence[str]
    demote: Sequence[str]
    cold: Sequence[str] = ()


class Unkept(NamedTuple):
    """Chunks kept in the cache for a change that was rolled back: evicted again if
    nothing references them now (best effort: no stored row)."""

    hashes: tuple[str, ...]


class OutboxFeed(Protocol):
    """What one namespace's delivery reads of committed state, and gives back; it never
    calls the committer or the pipeline (commit/ledger.py implements it)."""

    def subscribe(self, namespace: str, wake: asyncio.Event) -> None: ...  # set on new items

    def take(self, namespace: str) -> list[CommittedRow | Unkept]: ...  # in commit order

    def in_doubt(self, namespace: str, hashes: list[str]) -> set[str]: ...  # uncommitted

    def retire(self, row_ids: list[int]) -> None: ...  # rows no entry waits for any more


# ---- the session store --------------------------------------------------------------------
class StoreError(Exception):
    """Persisting a change failed (disk full, read-only database, I/O error)."""


class StoreFenced(StoreError):
    """A fenced write found the rows of ``sessions`` changed since this store last loaded,
    claimed or wrote them (another node took, wrote, deleted or created one): nothing of
    the write was stored, its transaction rolled back whole (docs/scale-out.md)."""

    def __init__(self, sessions: Sequence[str]) -> None:
        self.sessions = tuple(sessions)
        shown = ", ".join(repr(s) for s in self.sessions[:5])
        super().__init__(
            f"session {shown} changed on another node since this node read it (fenced: "
            "nothing written; the event is applied again on the stored state)"
        )


class StoreNotFound(StoreError):
    """The store an operator named does not exist (the admin port never creates one)."""


class StoreInUse(StoreError):
    """A daemon holds the store exclusively: the admin port refuses to change it.

    Attributes:
        holder: who holds it, as its lock says ("pid 123 (ram-a-kv)").
        lock_token: the token of that hold, as its lock says ("" when unknown); the
            holding daemon answers the same in ``GET /healthz`` (``store_lock``).
    """

    def __init__(self, store: str, holder: str, lock_token: str = "") -> None:
        self.store, self.holder, self.lock_token = store, holder, lock_token
        super().__init__(f"{store} is in use by {holder}")


class OutboxEntry(NamedTuple):
    """One acknowledged eviction: the chunk, and how it leaves the cache."""

    chunk_hash: str
    mode: EvictMode


class OutboxRow(NamedTuple):
    """One committed group of evictions, kept until the backend confirmed every entry: what
    a write and settle_owed take, and load_outbox returns.

    Attributes:
        row_id: increasing in commit order; the committer hands them out.
        namespace: the namespace the hashes belong to ("" = the default).
        entries: the evictions, in the order they were decided: (hash, mode) pairs,
            OutboxEntry as loaded; the committer zips plain pairs, since a named entry
            would cost it a call per evicted chunk and orjson one more to write it.
    """

    row_id: int
    namespace: str
    entries: tuple[tuple[str, EvictMode], ...]


class AnswerRow(NamedTuple):
    """An idempotent event's answer, as written: replayed for a retry of its event_id.

    Attributes:
        event_id: the client's id for the event.
        response_json: the reply sent, serialised.
        ts: wall-clock time it was answered (answers older than the window are pruned).
        request_digest: digest of the request, to refuse a reused id with other content.
    """

    event_id: str
    response_json: str
    ts: float
    request_digest: str


class StoredAnswer(NamedTuple):
    """An answer as loaded at start-up (its timestamp is only the store's business)."""

    event_id: str
    response_json: str
    request_digest: str


class LoadedForks(NamedTuple):
    """Every open fork, oldest first, and the next fork id to hand out (never below one
    already given, even when that fork has ended)."""

    forks: list[Fork]
    next_fork_id: int


@dataclass(frozen=True, slots=True)
class WriteBatch:
    """Everything one :meth:`SessionStore.write` commits in one transaction.

    Attributes:
        sessions: session id -> new state, or None to delete the session.
        outbox_add: new outbox rows.
        outbox_done: ids of outbox rows none of whose entries waits any more.
        event_ids: answers to remember.
        prune_event_ids_before: forget answers older than this timestamp.
        forks: fork id -> open fork, or None when it ended.
        next_fork_id: the counter's new value (stored only if higher).
        maps_unchanged: sessions of ``sessions`` whose map and turn count are as this
            store last wrote or loaded them: a row it holds may keep its stored map and
            have only its state (suspended, last_event_ts) written.
    """

    sessions: dict[str, Session | None]
    outbox_add: Sequence[OutboxRow] = ()
    outbox_done: Sequence[int] = ()
    event_ids: Sequence[AnswerRow] = ()
    prune_event_ids_before: float | None = None
    forks: Mapping[int, Fork | None] = field(default_factory=dict)
    next_fork_id: int | None = None
    maps_unchanged: Collection[str] = ()


# True in a background task (events.lanes: a sweep's events) and, set by the committer, while
# it writes a batch of background changes alone: a store that commits on the event loop
# (SQLite with synchronous=NORMAL) writes such a batch off it, so a sweep's large writes never
# hold the loop that client events wait for.
BACKGROUND: ContextVar[bool] = ContextVar("ramakv_background", default=False)


class SessionStore(Protocol):
    """Durable home of every session's map, turn count and suspension, and of open forks."""

    async def open(self) -> None:
        """Create or migrate the schema.

        Raises:
            StoreError: the database cannot be opened or created.
        """
        ...

    async def load_all(self) -> list[Session]:
        """Every stored session this daemon owns.

        Returns:
            The sessions; corrupt rows are skipped and logged.
        Raises:
            StoreError: the store cannot be read.
        """
        ...

    async def load_forks(self) -> LoadedForks:
        """Every open fork this daemon owns, and the fork id counter.

        Raises:
            StoreError: the store cannot be read.
        """
        ...

    async def load_outbox(self) -> list[OutboxRow]:
        """Evictions acknowledged but not yet confirmed by the backend.

        Returns:
            The rows in commit order; corrupt rows and entries of unknown modes are
            skipped and logged.
        Raises:
            StoreError: the store cannot be read.
        """
        ...

    async def load_event_ids(self, limit: int) -> list[StoredAnswer]:
        """The newest remembered answers to idempotent events.

        Args:
            limit: how many to return at most.
        Returns:
            Those answers, oldest first.
        Raises:
            StoreError: the store cannot be read.
        """
        ...

    async def write(self, batch: WriteBatch) -> None:
        """Apply ``batch`` in one transaction: the fenced write. Each session row is
        written or deleted only at the version this store last loaded, claimed or wrote,
        checked in that transaction (a row it never saw must not exist, a disowned one is
        never touched); a row written gets a new version.

        Raises:
            StoreError: nothing was written (StoreFenced: a row's version moved).
        """
        ...

    def version(self, session_id: str) -> int | None:
        """The version of the row this store last loaded, claimed or wrote, which its next
        write is conditional on; None: no row as it knows (a write must create one)."""
        ...

    def disown(self, session_ids: Sequence[str]) -> None:
        """Forget rows this node no longer owns: its release's close deletes nothing."""
        ...

    def problem(self) -> str | None:
        """Why this store cannot take writes now (for /readyz), or None when it can."""
        ...

    async def close(self) -> None:
        """Flush and close."""
        ...


@dataclass(frozen=True, slots=True)
class Claimed:
    """A session taken from another node: its row as that node last committed it, and its
    open forks, moved with it (docs/scale-out.md)."""

    session: Session
    previous_owner: str
    forks: tuple[Fork, ...] = ()


class OwedRelease(NamedTuple):
    """A map this node owes its own cache the release of: a session (or a fork's hold) it
    lost while it may have held nothing in memory (taken over, or closed by ramakv-admin),
    as it had committed it then."""

    row_id: int
    namespace: str
    session_id: str
    hashes: tuple[str, ...]


# What a daemon does when another node took one of its sessions: (session id, new owner).
ReleaseCallback = Callable[[str, str], None]


@runtime_checkable
class SharedSessionStore(SessionStore, Protocol):
    """A store several daemons share (PostgreSQL), each loading and writing only the
    sessions it owns; an event for a session another node owns takes it over."""

    node_id: str  # this daemon's node: the owner it writes

    @property
    def connected(self) -> bool:
        """False after a failed write or a lost notification channel, until the next
        success."""
        ...

    async def claim(self, session_id: str) -> Claimed | None:
        """Take a session from its node, atomically, telling that node; the row gets a new
        version (the old owner's writes of its copy are fenced from now).

        Returns:
            The row as the previous owner committed it (an own row as stored, with its
            forks: an adopt a failed commit rolled back); None when stored nowhere.
        Raises:
            StoreError: nothing was taken.
        """
        ...

    async def take_fork_id(self) -> int:
        """A fork id no daemon on this store was or will be given.

        Raises:
            StoreError: none was taken.
        """
        ...

    async def owners(self, session_ids: list[str]) -> dict[str, str]:
        """Session id -> owning node, for the stored ones among ``session_ids``."""
        ...

    async def stored_versions(self, session_ids: list[str]) -> dict[str, int]:
        """Session id -> its row's version now (is this node's copy current?)."""
        ...

    def on_release(self, callback: ReleaseCallback | None) -> None:
        """Call ``callback(session_id, new_owner)`` when another node takes a session."""
        ...

    def on_reconnect(self, callback: Callable[[], Awaitable[object]], every_s: float) -> None:
        """Run ``callback`` (the daemon's ownership check) after each reconnect of the
        notification channel, whose notifications sent meanwhile are lost, and every
        ``every_s`` seconds while it is up."""
        ...

    async def fork_owners_of(self, fork_ids: list[int]) -> dict[int, str]:
        """Fork id -> holding node, for the stored ones among ``fork_ids``."""
        ...

    async def owed_releases(self) -> list[OwedRelease]:
        """The releases this node owes (recorded by the claim or close that took each
        session from it, in that transaction), oldest first."""
        ...

    async def settle_owed(self, outbox_add: Sequence[OutboxRow], row_ids: list[int]) -> None:
        """In one transaction: write the eviction intents ``outbox_add`` to this node's
        outbox and delete the owed rows ``row_ids``.

        Raises:
            StoreError: nothing written, nothing deleted.
        """
        ...

    async def drop_owed(self, session_ids: list[str]) -> None:
        """Delete this node's owed rows of ``session_ids`` (released from memory already).

        Raises:
            StoreError: nothing deleted.
        """
        ...
