"""SQLite session store (aiosqlite, WAL): the original's sessions table plus our own tables."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import aiosqlite
import orjson

from ramakv_daemon.adapters import store_files
from ramakv_daemon.adapters.sqlite import forks as sqlite_forks
from ramakv_daemon.adapters.sqlite.forks import BUMP_FORK_IDS, UPSERT_FORK
from ramakv_daemon.adapters.sqlite.schema import (
    MIGRATIONS,
    SCHEMA,
    SELECT_SESSIONS,
    WITH_CODES,
    existing_sessions,
)
from ramakv_daemon.adapters.sqlite.writes import store_codes, write_sessions
from ramakv_daemon.adapters.store_lock import StoreLock, StoreLocked
from ramakv_daemon.adapters.store_rows import (
    codes_rows,
    decode_outbox_row,
    decode_sessions,
    dump_entries,
    fold_legacy_outbox,
    outbox_view,  # noqa: F401 - re-exported for tests reading a file's outbox
)
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import (
    BACKGROUND,
    LoadedForks,
    OutboxRow,
    StoredAnswer,
    StoreError,
    StoreFenced,
    WriteBatch,
)

T = TypeVar("T")

log = logging.getLogger("ramakv.store")

BUSY_TIMEOUT_MS = 5000
CHECKPOINT_EVERY = 32  # commits between looks at the WAL's size (one stat each)
# Commits wait for a checkpoint each time the WAL passes this: smaller means shorter waits
# (a 4 MiB checkpoint took 7-8 ms here). Half-rate turn_end p99, 2 runs each: 1 MiB 5.0
# and 7.3 ms, 4 MiB 10.9 and 11.2 ms, 16 MiB 23 and 25 ms; below 1 MiB no clear gain.
CHECKPOINT_WAL_BYTES = 1 << 20
# Between commits, the files are looked at this often: a deletion is repaired within it even
# when no event comes, so what was acknowledged before it survives a crash soon after.
FILE_CHECK_INTERVAL_S = 1.0


def _is_busy(err: BaseException | None) -> bool:
    """True for SQLite's "database is locked" (another connection holds the lock), with
    its extended codes (SQLITE_BUSY_RECOVERY, ...)."""
    code = getattr(err, "sqlite_errorcode", None)
    return (
        isinstance(err, sqlite3.OperationalError)
        and isinstance(code, int)
        and (code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED))
    )


_LOAD_BATCH = 256  # sessions per fetch at start-up


class SqliteSessionStore:
    """Sessions in one SQLite file; every write is one committed transaction.

    Reads (schema, start-up load) go through aiosqlite. Writes go through a second,
    plain sqlite3 connection: with synchronous=NORMAL a group commit runs on the event
    loop (it only hands pages to the OS) and WAL checkpoints run on a dedicated thread;
    with FULL/EXTRA (an fsync per commit) or ``commit_thread`` the whole group commit —
    several statements and the COMMIT — is one hop to that thread (aiosqlite has no
    public way to run several statements in one hop). WAL lets the connections share the
    file.
    """

    def __init__(
        self,
        path: str,
        synchronous: str = "NORMAL",
        commit_thread: bool = False,
        program: str = "ram-a-kv",
        check_integrity: bool = True,
    ) -> None:
        """``program`` is written into the lock file beside the pid (who holds the store);
        ``check_integrity`` runs ``PRAGMA quick_check`` at open."""
        self.path = path
        self.check_integrity = check_integrity
        # WAL + NORMAL survives kill -9 (the WAL is in the OS before commit returns);
        # FULL also survives power loss at the cost of an fsync per batch.
        self.synchronous = synchronous.upper()
        # With NORMAL a commit only hands pages to the OS (no fsync): it costs less on the
        # event loop than the hop to a thread and back (measured: p50 at half load 0.7 vs
        # 1.3-4 ms, 45 µs less CPU per turn_end). fsyncs stay off the loop: FULL/EXTRA
        # commit on the writer thread, and so do WAL checkpoints (auto-checkpoint is off).
        self.inline_commits = self.synchronous == "NORMAL" and not commit_thread
        self._db: aiosqlite.Connection | None = None
        self._writer: sqlite3.Connection | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ramakv-sqlite")
        memory = path == ":memory:"
        self._lock = None if memory else StoreLock(path, program)
        self._files = None if memory else store_files.StoreFiles(os.path.realpath(path))
        self._broken: str | None = None  # why writes are refused (the file is gone)
        self._writing = False  # a write() is under way (the idle file check stays out)
        self._recovering: asyncio.Future[None] | None = None  # the idle check repairing
        self._watcher: asyncio.Task[None] | None = None
        self._commits = 0
        self._checkpoint: asyncio.Future[None] | None = None
        # SQLite keeps the WAL beside the real file when the path is a symlink.
        self._wal_path = os.path.realpath(path) + "-wal"
        self._checkpointer: sqlite3.Connection | None = None
        # Fencing (the port's write contract): session id -> the version of its row as this
        # store loaded or wrote it. The file is this store's alone while open (its lock),
        # so no other writer can move a row: versions count this store's own writes, and
        # what the transaction checks is that a row it creates does not exist already
        # (one it never loaded). Absent: no row, as this store knows.
        self._versions: dict[str, int] = {}
        self._version_seq = 0

    def version(self, session_id: str) -> int | None:
        """The version of ``session_id``'s row this store last loaded or wrote."""
        return self._versions.get(session_id)

    def disown(self, session_ids: Sequence[str]) -> None:
        """Forget rows: writes never touch them again (the port's contract; a store one
        daemon has to itself never needs it)."""
        for sid in session_ids:
            self._versions.pop(sid, None)

    async def open(self) -> None:
        """Create the parent directory, take the store's lock, open the file (a new one is
        built whole under a temporary name first), enable WAL, create tables, check every
        page, start the idle file check.

        Raises:
            StoreError: naming the file — another process holds it (with its pid), it is
                empty, corrupt, unreadable or read-only. Nothing stays open then (an
                aiosqlite worker thread left running would keep the process alive).
        """
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            if self._lock is not None:
                self._lock.acquire_or_raise()
                store_files.refuse_empty(self.path)
                await self._in_thread(store_files.create_new, self.path, SCHEMA)
            self._db = await aiosqlite.connect(self.path)
            await self._db.execute("PRAGMA journal_mode=WAL")
            await self._db.execute(f"PRAGMA synchronous={self.synchronous}")
            await self._db.execute("PRAGMA busy_timeout=5000")
            await self._migrate()
            await self._db.executescript(SCHEMA)
            await self._db.commit()
            await sqlite_forks.migrate_fork_holds(self._db)
            self._writer = await self._in_thread(self._open_writer)
            if self.check_integrity:
                await self._in_thread(store_files.check_integrity, self._writer, self.path)
            self._checkpointer = await self._in_thread(self._open_checkpointer)
            if self._files is not None:
                self._files.record()
                self._watcher = asyncio.get_running_loop().create_task(
                    self._watch_files(), name="store-file-check"
                )
        except StoreLocked as err:
            await self.close()
            raise StoreError(str(err)) from err
        except StoreError:
            await self.close()
            raise
        except (OSError, sqlite3.Error) as err:
            await self.close()
            raise StoreError(f"cannot open session store {self.path}: {err}") from err

    @property
    def lock_token(self) -> str:
        """The token of this daemon's hold on the store's lock ("" without one: an
        in-memory store, or not open): ``GET /healthz`` says it as ``store_lock``."""
        return self._lock.token if self._lock is not None else ""

    def _open_checkpointer(self) -> sqlite3.Connection:
        # Opened with the others, never later: a connection opened after the WAL was
        # unlinked would create a new, empty one under the others' shared index.
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return conn

    async def _migrate(self) -> None:
        """Add columns that older files lack (never touches the original sessions table)."""
        db = self.db
        for table, column, ddl in MIGRATIONS:
            async with db.execute(f"PRAGMA table_info({table})") as cur:
                columns = {row[1] for row in await cur.fetchall()}
            if columns and column not in columns:
                await db.execute(ddl)
                log.info("session store: added %s.%s", table, column)

    def _open_writer(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        if self.inline_commits:
            # On the loop a lock held by another process (ramakv-admin, a second daemon)
            # must not block: fail at once, and that commit retries on the thread.
            conn.execute("PRAGMA busy_timeout=0")
            conn.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints run on the thread
            # Truncated whenever it restarts, so its size says how much waits to be copied.
            conn.execute("PRAGMA journal_size_limit=0")
        else:
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return conn

    async def _on_writer(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` on the write connection off the loop, waiting for locks.

        For start-up and operator work, never the hot path: on the writer thread (so never
        at once with another use of the connection) with the busy timeout on.
        """
        return await self._in_thread(self._waiting_for_locks, fn, args)

    def _waiting_for_locks(self, fn: Callable[..., T], args: tuple[object, ...]) -> T:
        """``fn(*args)`` with the busy timeout on (runs on the writer thread)."""
        db = self._writer
        assert db is not None
        if not self.inline_commits:
            return fn(*args)
        db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        try:
            return fn(*args)
        finally:
            db.execute("PRAGMA busy_timeout=0")

    async def _in_thread(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("session store is not open")
        return self._db

    async def load_all(self) -> list[Session]:
        """Every stored session; rows whose JSON is corrupt are skipped with a warning."""
        out: list[Session] = []
        query = SELECT_SESSIONS.format(namespace="st.namespace", **WITH_CODES)
        # The collector has to scan each new tuple of hashes once (the scan is what untracks
        # a tuple of strings). Left to its thresholds it also re-scans the sessions already
        # loaded, from its older generations, as the load piles up allocations; collecting
        # the youngest generation once per batch scans each batch once, while its strings
        # are still in cache: ~0.15 s less at 10k x 512.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            async with self.db.execute(query) as cur:
                # Batches, not fetchall: each batch's JSON text (~12 KB a session at 512
                # hashes) is freed before the next one arrives and its memory reused,
                # instead of the whole table's text being faulted in at once.
                versions = self._versions
                anchors: dict[str, tuple[str, ...]] = {}  # maps sharing a prefix share it
                from_json: list[Session] = []
                while rows := await cur.fetchmany(_LOAD_BATCH):
                    # Every stored row, a corrupt one too: writing it replaces it.
                    versions.update((r[0], 0) for r in rows)
                    out.extend(decode_sessions(rows, anchors, from_json))
                    gc.collect(0)
            if from_json:
                assert self._writer is not None
                await self._on_writer(store_codes, self._writer, codes_rows(from_json))
        except sqlite3.Error as err:
            raise StoreError(f"cannot read session store {self.path}: {err}") from err
        finally:
            if gc_was_enabled:
                gc.enable()
        return out

    async def load_forks(self) -> LoadedForks:
        """Every open fork, oldest first, and the next fork id to hand out."""
        try:
            return await sqlite_forks.load_forks(self.db)
        except sqlite3.Error as err:
            raise StoreError(f"cannot read forks: {err}") from err

    async def load_outbox(self) -> list[OutboxRow]:
        """Evictions acknowledged but not yet confirmed, as rows in commit order."""
        try:
            assert self._writer is not None
            await self._on_writer(fold_legacy_outbox, self._writer)
            async with self.db.execute(
                "SELECT id, namespace, entries_json FROM evict_log ORDER BY id"
            ) as cur:
                rows = await cur.fetchall()
        except (sqlite3.Error, AssertionError) as err:
            raise StoreError(f"cannot read evict outbox: {err}") from err
        return [row for r in rows if (row := decode_outbox_row(*r)) is not None]

    async def load_event_ids(self, limit: int) -> list[StoredAnswer]:
        """The newest ``limit`` remembered answers, oldest first."""
        try:
            async with self.db.execute(
                "SELECT event_id, response_json, request_digest FROM event_ids "
                "ORDER BY ts DESC LIMIT ?",
                (limit,),
            ) as cur:
                rows = await cur.fetchall()
        except sqlite3.Error as err:
            raise StoreError(f"cannot read event ids: {err}") from err
        return [StoredAnswer(e, r, d) for e, r, d in reversed(list(rows))]

    async def write(self, batch: WriteBatch) -> None:
        """One transaction: sessions (None = delete; only the state row of a stored one
        in ``maps_unchanged``), outbox rows added and done, answers, forks (None = ended)
        and the fork id counter."""
        if self._recovering is not None:  # the idle check is rewriting the file: after it
            await asyncio.shield(self._recovering)
        if self._writer is None:
            raise StoreError("session store is not open")
        if self._broken is not None:
            raise StoreError(self._broken)
        self._writing = True
        try:
            await self._write_and_verify(batch)
        finally:
            self._writing = False

    async def _write_and_verify(self, batch: WriteBatch) -> None:
        if not self.inline_commits:
            await self._in_thread(self._write_sync, batch)
        else:
            self._commits += 1
            if self._commits % CHECKPOINT_EVERY == 0:
                await self._checkpoint_if_due()
            if BACKGROUND.get():
                # A sweep's batch (ports.BACKGROUND): off the loop, so client events are
                # not held behind its writes; it waits for another process's lock there.
                await self._in_thread(self._waiting_for_locks, self._write_sync, (batch,))
            else:
                try:
                    self._write_sync(batch)
                except StoreError as err:
                    if not _is_busy(err.__cause__):
                        raise
                    # Another process holds the write lock: wait for it on the thread.
                    await self._in_thread(self._waiting_for_locks, self._write_sync, (batch,))
        await self.verify_files()

    async def _watch_files(self) -> None:
        """Between commits, notice a deleted file and repair it without waiting for the
        next commit (which would find it too): a kill -9 meanwhile then loses nothing."""
        files = self._files
        assert files is not None
        while self._broken is None:
            await asyncio.sleep(FILE_CHECK_INTERVAL_S)
            if self._writing or self._writer is None or files.problem() is None:
                continue
            self._recovering = asyncio.get_running_loop().create_future()
            try:
                await self.verify_files()
            except StoreError:
                pass  # logged; every later write answers 503
            finally:
                self._recovering.set_result(None)
                self._recovering = None

    def problem(self) -> str | None:
        """Why this store cannot take writes now (for /readyz), or None."""
        if self._writer is None:
            return "session store is not open"
        if self._broken is not None:
            return self._broken
        if self._files is not None and (what := self._files.problem()) is not None:
            return f"session store {self.path} {what} (the next commit rewrites it)"
        if self._files is not None:
            return store_files.space_problem(self._files.db_path)
        return None

    async def verify_files(self) -> None:
        """After a commit, before anyone is told: is what was committed in the file a
        restart opens? Two stats. If the file or its WAL was deleted, everything committed
        (this commit included) is copied from the still-open descriptors to a new file at
        the path and the store reopens on it; if that fails, or another file took the
        path, this and every later write fail (503) — nothing more is acknowledged.

        Raises:
            StoreError: the commit cannot survive a restart.
        """
        if self._files is None or self._broken is not None:
            if self._broken is not None:
                raise StoreError(self._broken)
            return
        problem = self._files.problem()
        if problem is None:
            return
        what = f"session store {self.path} {problem} while the daemon was running"
        if not self._files.recoverable():
            self._broken = (
                f"{what}; writes are refused so nothing is acknowledged that a restart "
                "would not find (restart the daemon once the file is where it belongs)"
            )
            log.error("%s", self._broken)
            raise StoreError(self._broken)
        log.error("%s: rewriting it from the open database", what)
        try:
            await self._recover()
        except (OSError, sqlite3.Error, StoreError) as err:
            self._broken = f"{what}, and rewriting it failed ({err}); writes are refused"
            log.error("%s", self._broken)
            raise StoreError(self._broken) from err
        log.warning("session store %s rewritten: nothing committed was lost", self.path)

    async def _recover(self) -> None:
        """Copy the open database to the path, then reopen every connection on it."""
        assert self._writer is not None and self._files is not None
        if self._checkpoint is not None:
            with contextlib.suppress(Exception):
                await self._checkpoint
        real = self._files.db_path
        tmp = await self._in_thread(store_files.copy_out, self._writer, real)
        for name in ("_writer", "_checkpointer"):
            conn = getattr(self, name)
            setattr(self, name, None)
            if conn is not None:
                await self._in_thread(conn.close)
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()
        await self._in_thread(store_files.move_in, tmp, real)
        self._db = await aiosqlite.connect(self.path)
        async with self._db.execute("PRAGMA journal_mode=WAL") as cur:
            await cur.fetchall()
        self._writer = await self._in_thread(self._open_writer)
        self._checkpointer = await self._in_thread(self._open_checkpointer)
        self._files.record()

    async def _checkpoint_if_due(self) -> None:
        """Once the WAL passes its size, commits wait for a checkpoint on the thread.

        Waiting is what makes it work: a checkpoint running alongside back-to-back commits
        never copies the last frame, so the WAL never restarts and grows without bound
        (166 MB after 20k writes, measured). With commits paused it completes (about 2 ms
        for 1 MiB here), and the next commit restarts the WAL from its beginning. The loop
        keeps serving meanwhile; only replies that wait for this commit wait longer.
        """
        try:
            wal = os.stat(self._wal_path).st_size
        except OSError:
            return
        if wal >= CHECKPOINT_WAL_BYTES:
            self._checkpoint = asyncio.get_running_loop().run_in_executor(
                self._thread, self._checkpoint_sync
            )
            await asyncio.shield(self._checkpoint)

    def _checkpoint_sync(self) -> None:
        """Copy the WAL into the database, on its own connection (runs on the thread)."""
        try:
            if self._checkpointer is None or (
                self._files is not None and self._files.problem() is not None
            ):
                return  # the next commit's file check deals with it
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as err:  # the next commit past the limit tries again
            log.warning("WAL checkpoint failed: %s", err)

    def _write_sync(self, batch: WriteBatch) -> None:
        sessions, forks, next_fork_id = batch.sessions, batch.forks, batch.next_fork_id
        outbox_add, outbox_done, event_ids = batch.outbox_add, batch.outbox_done, batch.event_ids
        prune_before = batch.prune_event_ids_before
        db = self._writer
        assert db is not None
        versions = self._versions
        # A map is skipped only where this store holds its row (else it must be written).
        kept = {sid for sid in batch.maps_unchanged if sid in versions}
        upserts = [s for s in sessions.values() if s is not None]
        # A session with no row here (created and closed before a commit) has none to delete.
        deletes = [(sid,) for sid, s in sessions.items() if s is None and sid in versions]
        created = [s.session_id for s in upserts if s.session_id not in versions]

        def dumps(value: object) -> str:
            return orjson.dumps(value).decode()

        try:
            db.execute("BEGIN IMMEDIATE")
            if created:
                fenced = existing_sessions(db, created)
                if fenced:
                    raise StoreFenced(fenced)
            write_sessions(db, upserts, deletes, kept)
            if forks:
                db.executemany(
                    UPSERT_FORK,
                    [
                        (f.fork_id, f.session_id, f.namespace, dumps(f.hashes), f.created_ts)
                        for f in forks.values()
                        if f is not None
                    ],
                )
                db.executemany(
                    "DELETE FROM forks WHERE fork_id = ?",
                    [(fid,) for fid, f in forks.items() if f is None],
                )
            if next_fork_id is not None:
                db.execute(BUMP_FORK_IDS, (next_fork_id,))
            if outbox_add:
                db.executemany(
                    "INSERT INTO evict_log (id, namespace, entries_json) VALUES (?, ?, ?)",
                    [(i, ns, dump_entries(entries)) for i, ns, entries in outbox_add],
                )
            if outbox_done:
                db.executemany("DELETE FROM evict_log WHERE id = ?", [(i,) for i in outbox_done])
            if event_ids:
                db.executemany(
                    "INSERT OR REPLACE INTO event_ids (event_id, response_json, ts, "
                    "request_digest) VALUES (?, ?, ?, ?)",
                    event_ids,
                )
            if prune_before is not None:
                db.execute("DELETE FROM event_ids WHERE ts < ?", (prune_before,))
            db.execute("COMMIT")
        except Exception as err:  # anything must roll back, or BEGIN stays open
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    log.exception("rollback after a failed write also failed")
            if isinstance(err, StoreFenced):
                raise
            raise StoreError(f"persistence failed: {err}") from err
        if upserts:
            self._version_seq += 1
            versions.update((s.session_id, self._version_seq) for s in upserts)
        for (sid,) in deletes:
            versions.pop(sid, None)

    async def close(self) -> None:
        """Close both connections and the writer thread (idempotent)."""
        self._versions = {}
        if self._watcher is not None:
            watcher, self._watcher = self._watcher, None
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        if self._checkpoint is not None:
            with contextlib.suppress(Exception):
                await self._checkpoint
        if self._writer is not None:
            writer, self._writer = self._writer, None
            await self._in_thread(writer.close)
        if self._checkpointer is not None:
            checkpointer, self._checkpointer = self._checkpointer, None
            await self._in_thread(checkpointer.close)
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()
        self._thread.shutdown(wait=False)
        if self._lock is not None:
            self._lock.release()
