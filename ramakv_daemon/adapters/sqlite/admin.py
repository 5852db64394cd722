"""The admin port on a SQLite store: read beside a running daemon, change only under its lock."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from ramakv_daemon.adapters.sqlite.forks import SELECT_FORKS, SELECT_LEGACY_HOLDS
from ramakv_daemon.adapters.sqlite.schema import SELECT_SESSIONS, WITH_CODES, WITHOUT_CODES
from ramakv_daemon.adapters.store_lock import StoreLock, holder_of, lock_path_of, token_of
from ramakv_daemon.adapters.store_rows import decode_fork, decode_sessions, pending_evictions
from ramakv_daemon.admin_port import AdminView, Cleanup, CleanupDone, StoreAdmin
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.ports import StoreError, StoreInUse, StoreNotFound

ADMIN_PROGRAM = "ramakv-admin"  # written into the lock file while the tool holds it
BUSY_TIMEOUT_S = 5.0
T = TypeVar("T")


def connect(path: str, *, write: bool) -> sqlite3.Connection:
    """Open an existing store file; read-only unless ``write`` (never creates one).

    Raises:
        StoreNotFound: there is no file at ``path``.
    """
    if not Path(path).exists():
        raise StoreNotFound(f"no session store at {path}")
    mode = "rw" if write else "ro"
    con = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, timeout=BUSY_TIMEOUT_S)
    con.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
    return con


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})")}


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def read_view(con: sqlite3.Connection) -> AdminView:
    """Every session, open fork and waiting eviction of a file, as a daemon would load
    them, written by any version: a file the daemon has not migrated yet may lack the
    namespace column and keep fork holds in session_state (given ids < 0 here)."""
    state_columns = _columns(con, "session_state")
    namespace = "st.namespace" if "namespace" in state_columns else "''"
    tables = _tables(con)
    codes = WITH_CODES if "session_codes" in tables else WITHOUT_CODES
    sessions = decode_sessions(con.execute(SELECT_SESSIONS.format(namespace=namespace, **codes)))
    forks: list[Fork] = []
    if "forks" in tables:
        for row in con.execute(SELECT_FORKS):
            fork = decode_fork(*row)
            if fork is not None:
                forks.append(fork)
    if "fork_holds_json" in state_columns:
        legacy_ns = "namespace" if "namespace" in state_columns else "''"
        for sid, holds, ns, ts in con.execute(SELECT_LEGACY_HOLDS.format(namespace=legacy_ns)):
            try:
                for hold in json.loads(holds):
                    forks.append(
                        Fork(-len(forks) - 1, sid, tuple(map(str, hold)), float(ts or 0), ns or "")
                    )
            except (ValueError, TypeError):
                continue
    return AdminView(sessions, forks, pending_evictions(con))


def read_file(path: str | Path) -> AdminView:
    """:func:`read_view` of the file at ``path``, opened read-only (a daemon may run).

    Raises:
        StoreNotFound: there is no file at ``path``.
        sqlite3.Error: it cannot be read.
    """
    con = connect(str(path), write=False)
    try:
        return read_view(con)
    finally:
        con.close()


@contextlib.contextmanager
def exclusive(path: str) -> Iterator[tuple[bool, str]]:
    """Yield (True, "") while holding the store's lock (no daemon has the file open), else
    (False, who holds it: "pid 123 (ram-a-kv)"). While held here, a daemon refuses to start
    on the file, naming this process."""
    lock = StoreLock(path, ADMIN_PROGRAM)
    try:
        free = lock.acquire()
    except OSError:
        yield True, ""  # the lock file cannot be created: no daemon could have either
        return
    try:
        yield (True, "") if free else (False, holder_of(lock.path))
    finally:
        lock.release()


def apply_cleanup(con: sqlite3.Connection, cleanup: Cleanup) -> None:
    """Delete the sessions, end the forks and queue the evictions, in one transaction.

    The evictions go to the per-chunk outbox tables (evict_outbox for the default
    namespace, ns_evict_outbox for the others), which the daemon folds into its evict_log
    at the next start: row ids there are the daemon's to hand out.
    """
    has_ns_box = "namespace" in _columns(con, "ns_evict_outbox")
    keeps_holds = "fork_holds_json" in _columns(con, "session_state")
    holds_ended = {f.session_id for f in cleanup.forks if f.fork_id <= 0}
    with con:
        for s in cleanup.sessions:
            con.execute("DELETE FROM sessions WHERE session_id = ?", (s.session_id,))
            if keeps_holds and s.session_id not in holds_ended:
                # An old file's fork holds outlive their session, as forks do: the row
                # stays until the daemon moves them into `forks` (and drops it then).
                con.execute(
                    "DELETE FROM session_state WHERE session_id = ? "
                    "AND fork_holds_json IN ('', '[]')",
                    (s.session_id,),
                )
            else:
                con.execute("DELETE FROM session_state WHERE session_id = ?", (s.session_id,))
        for f in cleanup.forks:
            if f.fork_id > 0:
                con.execute("DELETE FROM forks WHERE fork_id = ?", (f.fork_id,))
            else:  # a hold of a file the daemon has not migrated yet
                con.execute(
                    "UPDATE session_state SET fork_holds_json = '[]' WHERE session_id = ?",
                    (f.session_id,),
                )
        for ns, rows in cleanup.evict.items():
            for h, mode in rows.items():
                if ns == "":
                    con.execute(
                        "INSERT INTO evict_outbox (chunk_hash, mode) VALUES (?, ?) "
                        "ON CONFLICT(chunk_hash) DO UPDATE SET mode=excluded.mode",
                        (h, mode.value),
                    )
                elif has_ns_box:
                    con.execute(
                        "INSERT INTO ns_evict_outbox (namespace, chunk_hash, mode) "
                        "VALUES (?, ?, ?) ON CONFLICT(namespace, chunk_hash) DO UPDATE SET "
                        "mode=excluded.mode",
                        (ns, h, mode.value),
                    )


class SqliteStoreAdmin(StoreAdmin):
    """ramakv-admin's access to one daemon's SQLite file.

    Reads open the file read-only (WAL lets them run beside the daemon). Changes take the
    store's lock first, the one a daemon holds while it has the file open: held elsewhere,
    they raise StoreInUse and change nothing; held here, no daemon can start meanwhile.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    @property
    def shown(self) -> str:
        return self.path

    @property
    def shared(self) -> bool:
        return False

    async def open(self) -> None:
        if not Path(self.path).exists():
            raise StoreNotFound(f"no session store at {self.path}")

    async def read(self) -> AdminView:
        return await asyncio.to_thread(self._guarded, read_file, self.path)

    def holder(self) -> str | None:
        with exclusive(self.path) as (free, holder):
            return None if free else holder

    def lock_token(self) -> str:
        with exclusive(self.path) as (free, _):
            return "" if free else token_of(lock_path_of(self.path)) or ""

    async def close_sessions(self, cleanup: Cleanup) -> CleanupDone:
        """Under the lock, in one transaction: the sessions deleted, the planned forks
        ended, their evictions queued for the daemon's next start."""
        await asyncio.to_thread(self._locked, lambda: self._write(cleanup))
        return CleanupDone({s.session_id: None for s in cleanup.sessions})

    def _write(self, cleanup: Cleanup) -> None:
        con = connect(self.path, write=True)
        try:
            apply_cleanup(con, cleanup)
        finally:
            con.close()

    def vacuum_plan(self) -> str:
        return f"VACUUM {self.path} ({Path(self.path).stat().st_size} bytes)"

    async def vacuum(self) -> None:
        await asyncio.to_thread(self._locked, self._vacuum)

    def _vacuum(self) -> None:
        con = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        try:
            con.execute("VACUUM")
        finally:
            con.close()

    def _locked(self, act: Callable[[], None]) -> None:
        """``act()`` while holding the store's lock; StoreInUse when a daemon holds it."""
        with exclusive(self.path) as (free, holder):
            if not free:
                raise StoreInUse(self.path, holder, token_of(lock_path_of(self.path)) or "")
            self._guarded(act)

    def _guarded(self, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)``, a SQLite error raised as StoreError naming the file."""
        try:
            return fn(*args)
        except sqlite3.Error as err:
            raise StoreError(f"{self.path}: {err}") from err

    async def close(self) -> None:
        return None  # every operation opens and closes its own connection
