"""The admin port on a PostgreSQL store: every node's rows, clean-ups told to the owners."""

from __future__ import annotations

from collections import Counter

from ramakv_daemon.adapters.postgres import sql
from ramakv_daemon.adapters.postgres.store import DB_ERRORS, PostgresSessionStore
from ramakv_daemon.adapters.store_rows import decode_fork, decode_sessions, loads_json
from ramakv_daemon.admin_port import AdminView, Cleanup, CleanupDone, PendingEviction, StoreAdmin
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.ports import StoreError, mode_of

ADMIN_NODE = "ramakv-admin"  # the node id the tool connects as (it never owns a row)


class PostgresStoreAdmin(StoreAdmin):
    """ramakv-admin's access to one database shared by the daemons of many nodes.

    Nothing here waits for the daemons: reads see every node's committed rows, a closed
    session's row is deleted and its owner told at that commit (as on a handover), and
    VACUUM is the plain kind that takes no lock stopping their reads and writes.
    """

    def __init__(self, url: str, shown: str | None = None) -> None:
        """``shown`` names the store to the operator (default: the URL less its password)."""
        self._store = PostgresSessionStore(url, node_id=ADMIN_NODE, pool_size=1)
        self._shown = shown or self._store.shown_url()

    @property
    def shown(self) -> str:
        return self._shown

    @property
    def shared(self) -> bool:
        return True

    async def open(self) -> None:
        await self._store.open()

    async def read(self) -> AdminView:
        rows = await self._store.fetch(sql.SELECT_ALL_SESSIONS)
        owners = Counter(str(r["owner"]) for r in rows)
        sessions = decode_sessions(tuple(r)[:6] for r in rows)
        forks: list[Fork] = []
        for r in await self._store.fetch(sql.SELECT_ALL_FORKS):
            fork = decode_fork(*tuple(r))
            if fork is not None:
                forks.append(fork)
        outbox: list[PendingEviction] = []
        for r in await self._store.fetch(sql.SELECT_ALL_OUTBOX):
            loaded = loads_json(r["entries_json"])
            for h, m in loaded if isinstance(loaded, list) else ():
                mode = mode_of(str(m))
                if mode is not None:
                    outbox.append(PendingEviction(r["namespace"], str(h), mode))
        holders = {int(r[0]): str(r[1]) for r in await self._store.fetch(sql.SELECT_FORK_OWNERS)}
        return AdminView(sessions, forks, outbox, dict(owners), holders)

    def holder(self) -> str | None:
        return None  # shared: no daemon holds it alone

    async def close_sessions(self, cleanup: Cleanup) -> CleanupDone:
        """Each session's row is deleted only if no event reached it since the plan (same
        ``last_event_ts``), and its owner told at that commit: the owner then releases it
        as a session_close would (its chunks drop there and are evicted or demoted; only
        the owner's daemon reaches its LMCache). Forks are not ended: their references live
        in their node's memory, and only a session_fork_end there ends one."""
        closed: dict[str, str | None] = {}
        left: list[str] = []
        for s in cleanup.sessions:
            owner = await self._close_one(s.session_id, s.last_event_ts)
            if owner is None:
                left.append(s.session_id)
            else:
                closed[s.session_id] = owner
        holders = dict(
            (int(r[0]), str(r[1])) for r in await self._store.fetch(sql.SELECT_FORK_OWNERS)
        )
        kept = {f.fork_id: holders[f.fork_id] for f in cleanup.forks if f.fork_id in holders}
        return CleanupDone(closed, left, kept)

    async def _close_one(self, session_id: str, last_event_ts: float) -> str | None:
        """The owner told, or None when the row moved on or is gone (nothing changed)."""
        try:
            async with self._store.need_pool().acquire() as con, con.transaction():
                owner = await con.fetchval(sql.ADMIN_DELETE_SESSION, session_id, last_event_ts)
                if owner is not None:
                    await self._store.notify(con, [(session_id, str(owner))])
        except DB_ERRORS as err:
            raise StoreError(f"cannot close session {session_id!r}: {err}") from err
        return None if owner is None else str(owner)

    def vacuum_plan(self) -> str:
        return (
            "VACUUM (ANALYZE) the store's tables (plain VACUUM: running daemons go on "
            "reading and writing)"
        )

    async def vacuum(self) -> None:
        try:
            async with self._store.need_pool().acquire() as con:
                await con.execute(sql.VACUUM_TABLES)
        except DB_ERRORS as err:
            raise StoreError(f"cannot vacuum: {err}") from err

    async def close(self) -> None:
        await self._store.close()
