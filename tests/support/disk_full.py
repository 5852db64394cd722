"""A file system that fills up: a tmpfs mounted for a test, and a writer that fills it."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(args: list[str]) -> str | None:
    """Run mount/umount; None on success, else why it failed."""
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


@contextmanager
def tmpfs(mnt: Path, options: str, skip_reason: str) -> Iterator[Path]:
    """Mount a tmpfs (``-o options``) on the new directory ``mnt``; unmount on exit.

    Where mounting is not allowed the test is skipped with ``skip_reason`` (``{why}`` in it
    is replaced by what mount said).
    """
    mnt.mkdir()
    why = _mount(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)])
    if why is not None:
        pytest.skip(skip_reason.format(why=why))
    try:
        yield mnt
    finally:
        _mount(["umount", "-l", str(mnt)])


def fill(path: Path) -> int:
    """Write ``path`` until the file system is full; returns the bytes written."""
    written = 0
    block = os.urandom(64 * 1024)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                n = f.write(block)
            except OSError as err:
                assert err.errno == errno.ENOSPC, err
                break
            written += n
            if n < len(block):
                block = block[:1024]
    return written
