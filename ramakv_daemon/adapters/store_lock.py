"""One process per session store: an exclusive flock on ``<store>.lock`` holding its pid,
program and a token of this hold (ramakv-admin matches it against the daemon it talks to)."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: no locking (documented)
    fcntl = None  # type: ignore[assignment]


class StoreLocked(Exception):
    """Another process holds the store's lock."""

    def __init__(self, store: str, lock_path: str, holder: str) -> None:
        self.store, self.lock_path, self.holder = store, lock_path, holder
        super().__init__(
            f"session store {store} is in use by {holder} (lock file {lock_path}); "
            "refusing to start a second daemon on it"
        )


def lock_path_of(store: str) -> str:
    """``<real path of the store>.lock``: two spellings of one file (a symlink) share it."""
    return os.path.realpath(store) + ".lock"


def holder_of(lock_path: str) -> str:
    """Who holds the lock, as its holder wrote it ("pid 123 (ram-a-kv)"), or "another
    process (pid unknown)" when the file is empty or unreadable."""
    try:
        text = Path(lock_path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    pid, prog, _ = _fields(text)
    if not pid.isdigit():
        return "another process (pid unknown)"
    return f"pid {pid}" + (f" ({prog})" if prog else "")


def token_of(lock_path: str) -> str | None:
    """The token the lock's holder wrote (see :attr:`StoreLock.token`), or None (no holder,
    an unreadable file, or one written before tokens)."""
    try:
        text = Path(lock_path).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return _fields(text)[2] or None


def _fields(text: str) -> tuple[str, str, str]:
    """``"<pid> <program> <token>"`` -> (pid, program, token); missing ones are ""."""
    parts = text.split(" ")
    return parts[0], " ".join(parts[1:2]), " ".join(parts[2:3])


class StoreLock:
    """An exclusive, non-blocking flock; the kernel drops it when the process dies (even
    by kill -9), so a stale lock file never blocks a restart."""

    def __init__(self, store: str, program: str) -> None:
        self.store = store
        self.path = lock_path_of(store)
        self.program = program
        self._fd: int | None = None
        # New for each hold: a daemon restarted on the same file (same pid in a container)
        # is told apart from the one a plan was made against.
        self.token = ""

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock and write our pid; False when another process holds it.

        Raises:
            OSError: the lock file cannot be created (the caller decides what that means).
        """
        if fcntl is None or self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        token = secrets.token_hex(16)
        os.pwrite(fd, f"{os.getpid()} {self.program} {token}\n".encode(), 0)
        self._fd, self.token = fd, token
        return True

    def acquire_or_raise(self) -> None:
        """Take the lock, or raise StoreLocked naming the store and the holder's pid."""
        if not self.acquire():
            raise StoreLocked(self.store, self.path, holder_of(self.path))

    def release(self) -> None:
        """Drop the lock (idempotent). The file stays: deleting it would race a waiter."""
        if self._fd is not None:
            fd, self._fd, self.token = self._fd, None, ""
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            with contextlib.suppress(OSError):
                os.close(fd)
