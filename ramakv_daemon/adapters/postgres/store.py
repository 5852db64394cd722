"""PostgreSQL session store (asyncpg, pooled): one database shared by the daemons of many
nodes, each loading and writing only the sessions it owns (docs/scale-out.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ramakv_daemon.adapters.postgres import sql
from ramakv_daemon.adapters.postgres.listener import ReleaseListener
from ramakv_daemon.adapters.store_rows import (
    decode_fork,
    decode_outbox_row,
    decode_sessions,
    dump_entries,
    loads_json,
)
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.packed import text_for_store
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import (  # Claimed, ReleaseCallback: re-exported
    Claimed,
    LoadedForks,
    OutboxRow,
    OwedRelease,
    ReleaseCallback,
    StoredAnswer,
    StoreError,
    StoreFenced,
    WriteBatch,
)

if TYPE_CHECKING:  # checked with the `postgres` extra installed
    import asyncpg
else:
    try:
        import asyncpg
    except ImportError:  # the `postgres` extra is not installed
        asyncpg = None

log = logging.getLogger("ramakv.store")

DB_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncio.TimeoutError)
if asyncpg is not None:
    DB_ERRORS += (asyncpg.PostgresError, asyncpg.InterfaceError)
OPEN_ERRORS: tuple[type[BaseException], ...] = (*DB_ERRORS, RuntimeError)  # or a bad migration


class ForkIdTaken(RuntimeError):
    """Another node handed out the same fork id first."""


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()


class PostgresSessionStore:
    """Sessions in a PostgreSQL database; every write is one committed transaction.

    ``synchronous_commit`` is forced on for the store's connections, so a write returns
    only once PostgreSQL has flushed its WAL: an acknowledged change survives a kill -9
    of the daemon and a restart (or crash) of PostgreSQL. A failed write raises
    StoreError and its transaction is rolled back.
    """

    def __init__(
        self,
        url: str,
        node_id: str,
        pool_size: int = 4,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self.node_id = node_id
        self.pool_size = max(1, pool_size)
        self.connect_timeout_s = connect_timeout_s
        self._pool: Any = None
        self.listener: ReleaseListener | None = None
        self._on_release: ReleaseCallback | None = None
        self.schema_version = 0
        self.last_error = ""
        self.write_failures = 0
        self.fenced_writes = 0  # writes refused because a row's version moved
        # session id -> the version of its row this node last loaded, claimed or wrote:
        # what its next write is conditional on (fencing; absent: no row, as we know it).
        self._versions: dict[str, int] = {}

    # ---- life cycle ------------------------------------------------------------------
    async def open(self) -> None:
        """Connect the pool, apply pending migrations, start listening for takeovers."""
        if asyncpg is None:
            raise StoreError(
                "session_store_url is a PostgreSQL URL but asyncpg is not installed: "
                "pip install 'ram-a-kv[postgres]'"
            )
        from ramakv_daemon.adapters.postgres.schema import migrate

        try:
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=1,
                max_size=self.pool_size,
                timeout=self.connect_timeout_s,
                command_timeout=30,
                server_settings={
                    "synchronous_commit": "on",
                    "application_name": f"ram-a-kv {self.node_id}"[:63],
                },
            )
            async with self._pool.acquire() as con:
                self.schema_version = await migrate(con)
        except OPEN_ERRORS as err:
            await self._close_pool()
            raise StoreError(f"cannot open session store {self.shown_url()}: {err}") from err
        self.listener = ReleaseListener(
            self.url,
            self.node_id,
            self._released,
            self._check_ownership,
            self._reconcile_every_s,
            self._back,
        )
        await self.listener.start()

    def shown_url(self) -> str:
        """The URL without its password (never logged)."""
        head, at, tail = self.url.rpartition("@")
        if not at:
            return self.url
        scheme, _, userinfo = head.partition("://")
        return f"{scheme}://{userinfo.partition(':')[0]}@{tail}"

    def on_release(self, callback: ReleaseCallback | None) -> None:
        """Call ``callback(session_id, new_owner)`` when another node takes a session."""
        self._on_release = callback

    def _released(self, session_id: str, new_owner: str) -> None:
        if self._on_release is not None:
            self._on_release(session_id, new_owner)

    def on_reconnect(self, callback: Callable[[], Awaitable[object]], every_s: float) -> None:
        """Run ``callback`` after each LISTEN reconnect (notifications sent meanwhile are
        lost) and every ``every_s`` seconds while connected: the daemon's ownership check."""
        self._reconcile, self._reconcile_every_s = callback, every_s

    _reconcile: Callable[[], Awaitable[object]] | None = None
    _reconcile_every_s = 30.0

    def _back(self) -> None:
        """The server answers the LISTEN connection again."""
        self.last_error = ""

    async def _check_ownership(self) -> None:
        if self._reconcile is not None:
            await self._reconcile()

    async def owners(self, session_ids: list[str]) -> dict[str, str]:
        """session id -> owning node, for the stored ones among ``session_ids``."""
        rows = await self.fetch(
            "SELECT session_id, owner FROM sessions WHERE session_id = ANY($1::text[])",
            session_ids,
        )
        return {r["session_id"]: r["owner"] for r in rows}

    async def stored_versions(self, session_ids: list[str]) -> dict[str, int]:
        """session id -> its row's version now, for the stored ones among ``session_ids``."""
        rows = await self.fetch(sql.SELECT_VERSIONS, session_ids)
        return {r[0]: int(r[1]) for r in rows}

    async def fork_owners_of(self, fork_ids: list[int]) -> dict[int, str]:
        """fork id -> holding node, for the stored ones among ``fork_ids``."""
        rows = await self.fetch(sql.SELECT_FORK_OWNERS_OF, fork_ids)
        return {int(r[0]): str(r[1]) for r in rows}

    async def owed_releases(self) -> list[OwedRelease]:
        """What this node owes its cache for sessions lost meanwhile, oldest first (a row
        whose map cannot be read is returned empty: settling it just deletes it)."""
        out: list[OwedRelease] = []
        for r in await self.fetch(sql.SELECT_OWED, self.node_id):
            try:
                hashes = loads_json(r["hashes_json"])
            except ValueError:
                hashes = None
            if not isinstance(hashes, list):
                log.warning("owed release %d of %r: unreadable map", r["id"], r["session_id"])
                hashes = []
            owed = tuple(str(h) for h in hashes)
            out.append(OwedRelease(int(r["id"]), str(r["namespace"]), str(r["session_id"]), owed))
        return out

    async def settle_owed(self, outbox_add: Sequence[OutboxRow], row_ids: list[int]) -> None:
        """The owed rows' eviction intents into this node's outbox and the rows deleted, in
        one transaction: a kill -9 leaves either the rows or the intents, never neither."""
        node = self.node_id
        try:
            async with self.need_pool().acquire() as con, con.transaction():
                if outbox_add:
                    await con.executemany(
                        sql.INSERT_OUTBOX,
                        [(node, i, ns, dump_entries(entries)) for i, ns, entries in outbox_add],
                    )
                await con.execute(sql.DELETE_OWED, node, row_ids)
        except DB_ERRORS as err:
            self._failed(err)
            raise StoreError(f"cannot settle owed releases: {err}") from err
        self.last_error = ""

    async def drop_owed(self, session_ids: list[str]) -> None:
        """Forget this node's owed rows of sessions it released from memory."""
        try:
            await self.need_pool().execute(sql.DELETE_OWED_OF, self.node_id, session_ids)
        except DB_ERRORS as err:
            self._failed(err)
            raise StoreError(f"cannot drop owed releases: {err}") from err
        self.last_error = ""

    @property
    def connected(self) -> bool:
        """False after a failed write or a lost listener, until the next success."""
        listening = self.listener is None or self.listener.connected
        return self._pool is not None and not self.last_error and listening

    def problem(self) -> str | None:
        """Why this store cannot take writes now (for /readyz), or None."""
        if self._pool is None:
            return "session store is not open"
        if self.last_error:
            return f"PostgreSQL unavailable ({self.last_error}); changes answer 503"
        if self.listener is not None and not self.listener.connected:
            return (
                "PostgreSQL LISTEN connection lost, reconnecting with backoff "
                f"({self.listener.reconnects} reconnects so far)"
            )
        return None

    async def close(self) -> None:
        """Stop listening and close the pool (idempotent)."""
        if self.listener is not None:
            listener, self.listener = self.listener, None
            await listener.stop()
        await self._close_pool()

    async def _close_pool(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), timeout=5)
            except Exception:  # a dead server (or any error): just drop it
                pool.terminate()

    def need_pool(self) -> Any:
        """The connection pool (for the admin adapter's transactions).

        Raises:
            StoreError: the store is not open.
        """
        if self._pool is None:
            raise StoreError("session store is not open")
        return self._pool

    async def fetch(self, query: str, *args: object) -> list[Any]:
        """The rows of one query on a pooled connection.

        Raises:
            StoreError: the database cannot be read.
        """
        try:
            return list(await self.need_pool().fetch(query, *args))
        except DB_ERRORS as err:
            raise StoreError(f"cannot read session store: {err}") from err

    # ---- loading ---------------------------------------------------------------------
    async def load_all(self) -> list[Session]:
        """The sessions this node owns (corrupt rows are skipped and logged)."""
        rows = await self.fetch(sql.SELECT_OWNED, self.node_id)
        self._versions = {r[0]: int(r[6]) for r in rows}
        return decode_sessions((tuple(r)[:6] for r in rows), {})

    def version(self, session_id: str) -> int | None:
        """The version of ``session_id``'s row this node last loaded, claimed or wrote."""
        return self._versions.get(session_id)

    def disown(self, session_ids: Sequence[str]) -> None:
        """Forget rows this node no longer owns: writes never touch them again."""
        for sid in session_ids:
            self._versions.pop(sid, None)

    async def load_forks(self) -> LoadedForks:
        """This node's open forks, oldest first, and the next fork id (above any node's)."""
        rows = await self.fetch(sql.SELECT_FORKS, self.node_id)
        next_id = int((await self.fetch(sql.NEXT_FORK_ID))[0][0])
        forks: list[Fork] = []
        for row in rows:
            fork = decode_fork(*row)
            if fork is not None:
                forks.append(fork)
        return LoadedForks(forks, next_id)

    async def load_outbox(self) -> list[OutboxRow]:
        """This node's acknowledged, unconfirmed evictions, in commit order."""
        rows = await self.fetch(sql.SELECT_OUTBOX, self.node_id)
        return [row for r in rows if (row := decode_outbox_row(*r)) is not None]

    async def load_event_ids(self, limit: int) -> list[StoredAnswer]:
        """The newest ``limit`` remembered answers, oldest first."""
        rows = await self.fetch(sql.SELECT_ANSWERS, limit)
        return [StoredAnswer(e, r, d) for e, r, d in reversed(rows)]

    async def claim(self, session_id: str) -> Claimed | None:
        """Take ``session_id`` from the node that owns it, atomically (row lock, a new
        version), telling that node at commit; None when it is stored nowhere. A row this
        node owns comes back as stored (previous_owner: this node), with its forks."""
        try:
            async with self.need_pool().acquire() as con, con.transaction():
                row = await con.fetchrow(sql.CLAIM_SESSION, session_id, self.node_id)
                if row is None:
                    return None
                if row["previous_owner"] == self.node_id:  # an own row: its own forks too
                    fork_rows = await con.fetch(sql.SELECT_FORKS_OF, session_id, self.node_id)
                else:
                    fork_rows = await con.fetch(
                        sql.CLAIM_FORKS, session_id, self.node_id, row["previous_owner"]
                    )
                    await self.notify(con, [(session_id, row["previous_owner"])])
        except DB_ERRORS as err:
            self._failed(err)
            raise StoreError(f"cannot take over session {session_id!r}: {err}") from err
        self.last_error = ""
        self._versions[session_id] = int(row["version"])
        sessions = decode_sessions([tuple(row)[:6]])
        forks = tuple(f for f in (decode_fork(*r) for r in fork_rows) if f is not None)
        return Claimed(sessions[0], row["previous_owner"], forks) if sessions else None

    async def take_fork_id(self) -> int:
        """A fork id no daemon on this database was or will be given (atomic on the
        counter row); skipped, never reused, if the fork's commit then fails."""
        try:
            value = await self.need_pool().fetchval(sql.TAKE_FORK_ID)
        except DB_ERRORS as err:
            self._failed(err)
            raise StoreError(f"cannot take a fork id: {err}") from err
        self.last_error = ""
        return int(value)

    async def notify(self, con: Any, taken: Sequence[tuple[str, str]]) -> None:
        """Tell each previous owner (delivered when the transaction commits)."""
        for session_id, owner in taken:
            payload = _dumps({"session_id": session_id, "from": owner, "to": self.node_id})
            await con.execute(sql.NOTIFY_RELEASE, sql.RELEASE_CHANNEL, payload)

    # ---- writing ---------------------------------------------------------------------
    async def write(self, batch: WriteBatch) -> None:
        """One transaction, committed (WAL flushed) before it returns, fenced: each session
        row only at the version this node last read (StoreFenced, nothing written, when
        one moved); a write never takes a session over (only :meth:`claim` does). A row
        held here whose map is in ``maps_unchanged`` keeps its stored map."""
        pool = self.need_pool()
        try:
            async with pool.acquire() as con, con.transaction():
                written, deleted = await self._write_in(con, batch)
        except StoreFenced:  # the database is fine: the rows moved (rolled back whole)
            self.fenced_writes += 1
            raise
        except ForkIdTaken as err:  # the database is fine: only this commit fails
            raise StoreError(f"persistence failed: {err}") from err
        except DB_ERRORS as err:
            self._failed(err)
            raise StoreError(f"persistence failed: {err}") from err
        self.last_error = ""
        # Committed: the next write of each row is conditional on what this one wrote.
        self._versions.update(written)
        for sid in deleted:
            self._versions.pop(sid, None)

    def _failed(self, err: BaseException) -> None:
        self.write_failures += 1
        if not self.last_error:
            log.error("PostgreSQL session store unavailable: %s", err)
        self.last_error = str(err) or type(err).__name__

    async def _write_in(self, con: Any, batch: WriteBatch) -> tuple[dict[str, int], list[str]]:
        """The transaction's statements; the rows written (id -> new version) and deleted.

        Raises:
            StoreFenced: a session row is not at the version this node expects.
        """
        sessions, forks, next_fork_id = batch.sessions, batch.forks, batch.next_fork_id
        outbox_add, outbox_done, event_ids = batch.outbox_add, batch.outbox_done, batch.event_ids
        prune_before = batch.prune_event_ids_before
        node = self.node_id
        versions = self._versions
        written: dict[str, int] = {}
        fenced: list[str] = []
        upserts = [s for s in sessions.values() if s is not None]
        if upserts:
            ids = [s.session_id for s in upserts]
            expected = [versions.get(sid) for sid in ids]
            unchanged = set(batch.maps_unchanged)
            rows = await con.fetch(
                sql.UPSERT_SESSIONS,
                ids,
                [s.namespace for s in upserts],
                [
                    None  # the row's stored map stays (an update: a row held here)
                    if v is not None and s.session_id in unchanged
                    else _dumps(text_for_store(s.chunk_hashes))
                    for s, v in zip(upserts, expected, strict=True)
                ],
                [s.turn_count for s in upserts],
                [s.suspended for s in upserts],
                [s.last_event_ts for s in upserts],
                expected,
                node,
            )
            written = {r[0]: int(r[1]) for r in rows}
            if len(written) < len(ids):
                fenced.extend(sid for sid in ids if sid not in written)
        # A session this node holds no row of (created and closed before any commit, or
        # disowned: released after another node took it) has nothing to delete.
        deletes = [sid for sid, s in sessions.items() if s is None and sid in versions]
        if deletes:
            rows = await con.fetch(
                sql.DELETE_SESSIONS, deletes, [versions[sid] for sid in deletes], node
            )
            if len(rows) < len(deletes):
                gone = {r[0] for r in rows}
                fenced.extend(sid for sid in deletes if sid not in gone)
        if fenced:
            raise StoreFenced(fenced)  # rolls the whole transaction back
        live = [f for f in forks.values() if f is not None]
        for f in live:  # forks are rare: one statement each, to see a taken id
            kept = await con.fetchval(
                sql.UPSERT_FORK,
                f.fork_id,
                f.session_id,
                f.namespace,
                _dumps(f.hashes),
                f.created_ts,
                node,
            )
            if kept is None:
                # Never overwrite another node's fork: fail the commit (503); the id is
                # skipped, so the client's retry gets a fresh one.
                raise ForkIdTaken(f"fork id {f.fork_id} is held by another node")
        ended = [fid for fid, f in forks.items() if f is None]
        if ended:
            await con.execute(sql.DELETE_FORKS, ended, node)
        if next_fork_id is not None:
            await con.execute(sql.BUMP_FORK_IDS, next_fork_id)
        if outbox_add:
            await con.executemany(
                sql.INSERT_OUTBOX,
                [(node, i, ns, dump_entries(entries)) for i, ns, entries in outbox_add],
            )
        if outbox_done:
            await con.execute(sql.DELETE_OUTBOX, node, list(outbox_done))
        if event_ids:
            await con.executemany(sql.UPSERT_ANSWER, event_ids)
        if prune_before is not None:
            await con.execute(sql.PRUNE_ANSWERS, prune_before)
        return written, deletes
