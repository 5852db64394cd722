"""The store's files on disk: refuse an empty or corrupt file, notice one deleted under us."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass

from ramakv_daemon.ports import StoreError

FileId = tuple[int, int] | None  # (st_dev, st_ino), None = no such file


def file_id(path: str) -> FileId:
    """The identity of the file at ``path`` now (follows symlinks), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


MIN_FREE_BYTES = 1 << 20  # below this a commit may fail any moment: not ready


def space_problem(path: str) -> str | None:
    """Why the file system holding ``path`` cannot take writes now (read-only, nearly
    full), or None. One statvfs: cheap enough for every readiness probe."""
    try:
        st = os.statvfs(os.path.dirname(path) or ".")
    except OSError as err:
        return f"cannot look at the file system of {path}: {err}"
    if st.f_flag & os.ST_RDONLY:
        return f"the file system of {path} is mounted read-only"
    free = st.f_bavail * st.f_frsize
    if free < MIN_FREE_BYTES:
        return f"the file system of {path} has {free} bytes free (< {MIN_FREE_BYTES})"
    return None


def refuse_empty(path: str) -> None:
    """A 0-byte file at the store path is not an empty store: refuse to start on it.

    SQLite would take it as an empty database and the daemon would start with no sessions
    (a truncated copy, a failed restore); a missing file is the way to ask for a new store.
    """
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return
    except OSError as err:
        raise StoreError(f"cannot open session store {path}: {err}") from err
    if size == 0:
        raise StoreError(
            f"cannot open session store {path}: the file is empty (0 bytes), not a SQLite "
            "database; restore it from a backup, or remove it to start with no sessions"
        )


def create_new(path: str, schema: str) -> None:
    """A new store is built under a temporary name and renamed into place whole: a crash
    while creating it never leaves a 0-byte file at the path (which start-up refuses)."""
    if os.path.lexists(path):
        return
    tmp = _fresh(path + ".new")
    conn = sqlite3.connect(tmp)
    try:
        # One transaction, no syncs: the file is synced whole below before it is renamed
        # into place, and a crash before then leaves only the temporary name (cleared on
        # the next try). A commit per statement, each synced, cost a first start 10 to
        # 250 ms on a disk (5 ms of CPU).
        conn.execute("PRAGMA synchronous=OFF")
        conn.executescript(f"BEGIN;\n{schema}\nCOMMIT;")
        conn.execute("PRAGMA journal_mode=WAL").fetchall()
    finally:
        conn.close()
    _fsync(tmp)
    os.replace(tmp, path)


def _fresh(tmp: str) -> str:
    """``tmp`` with no file (nor journal, WAL or shm) left from an interrupted earlier try."""
    for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)
    return tmp


def _fsync(path: str) -> None:
    """The file's data on disk before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_integrity(conn: sqlite3.Connection, path: str) -> None:
    """``PRAGMA quick_check`` (every page of every b-tree, no index cross-check): a
    garbage page anywhere fails start-up instead of a later write."""
    rows = conn.execute("PRAGMA quick_check").fetchall()
    if rows != [("ok",)]:
        lines = [str(r[0]) for r in rows if not str(r[0]).startswith("*** in database")]
        problems = "; ".join(lines[:3]) + ("; ..." if len(lines) > 3 else "")
        raise StoreError(f"session store {path} is corrupt (quick_check: {problems})")


@dataclass(slots=True)
class StoreFiles:
    """The database file and its WAL as they were when the store opened them.

    SQLite keeps writing through its open descriptors after the file (or only its WAL) is
    unlinked: every commit "succeeds" into a file no restart will find. Comparing the
    identities after each commit tells whether what was just committed can survive.
    """

    db_path: str  # the real path (symlinks resolved)
    db: FileId = None
    wal: FileId = None

    @property
    def wal_path(self) -> str:
        return self.db_path + "-wal"

    def record(self) -> None:
        """Remember the identities of the files open now."""
        self.db, self.wal = file_id(self.db_path), file_id(self.wal_path)

    def problem(self) -> str | None:
        """What happened to the files since :meth:`record`, or None when unchanged."""
        now = file_id(self.db_path)
        if now != self.db:
            return "was deleted" if now is None else "was replaced by another file"
        if self.wal is not None and file_id(self.wal_path) != self.wal:
            return "lost its WAL file (deleted or replaced)"
        return None

    def recoverable(self) -> bool:
        """True when the path holds no other file than ours: rewriting it loses nothing
        anybody else put there (a file replaced by another is never overwritten)."""
        now = file_id(self.db_path)
        return now is None or now == self.db


def copy_out(source: sqlite3.Connection, path: str) -> str:
    """Copy everything ``source`` sees (its open, maybe unlinked, file and WAL) into a new
    file beside ``path``, synced; returns that file's path (the caller moves it in place)."""
    tmp = _fresh(path + ".recover")
    dest = sqlite3.connect(tmp)
    try:
        source.backup(dest)
        # WAL already, like the file it replaces (persistent in the header): the store
        # reopens on it with no journal-mode change, which would need an exclusive lock.
        dest.execute("PRAGMA journal_mode=WAL").fetchall()
    finally:
        dest.close()
    _fsync(tmp)
    return tmp


def move_in(tmp: str, path: str) -> None:
    """Put the recovered copy at ``path``; a stale WAL or index of the lost file must go
    first, or SQLite would apply the lost file's frames to the new one."""
    for stale in (path + "-wal", path + "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale)
    os.replace(tmp, path)
    dirfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
