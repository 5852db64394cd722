"""Where group commits run: on the loop with NORMAL (checkpoints on a thread), else a thread."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from ramakv_daemon.adapters.sqlite import store as sqlite_store
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import WriteBatch

HANG_GUARD_S = 120.0  # a hang fails the test; nothing here is timed


def session(i: int, n: int = 1000) -> Session:
    return Session(f"s{i}", tuple(f"{i:05d}-{k:04d}-{'x' * 12}" for k in range(n)), 1)


@pytest.mark.parametrize(
    ("synchronous", "thread_flag", "inline"),
    [("NORMAL", False, True), ("NORMAL", True, False), ("FULL", False, False)],
)
async def test_commits_inline_only_with_normal(
    tmp_path: Path, synchronous: str, thread_flag: bool, inline: bool
) -> None:
    store = SqliteSessionStore(str(tmp_path / "s.db"), synchronous, thread_flag)
    assert store.inline_commits is inline
    await store.open()
    try:
        await store.write(WriteBatch({"s1": session(1, 3)}))
        assert [s.chunk_hashes for s in await store.load_all()] == [session(1, 3).chunk_hashes]
    finally:
        await store.close()


@pytest.mark.parametrize("via_symlink", [False, True])
async def test_wal_stays_bounded_under_back_to_back_commits(
    tmp_path: Path, via_symlink: bool
) -> None:
    # No pause between commits: a checkpoint alongside them would never finish, so past
    # the limit commits wait for one. Through a symlink SQLite keeps the WAL beside the
    # real file, which is the one to watch.
    real = tmp_path / "data" / "s.db"
    real.parent.mkdir()
    path = real
    if via_symlink:
        path = tmp_path / "link.db"
        # A 0-byte file is refused as a store: the target starts as a real (empty) database.
        sqlite3.connect(real).execute("PRAGMA journal_mode=WAL").fetchall()
        path.symlink_to(real)
    store = SqliteSessionStore(str(path))
    await store.open()
    try:
        written, i, peak = 0, 0, 0
        while written < 10 * sqlite_store.CHECKPOINT_WAL_BYTES:
            s = session(i % 50)  # rewriting 50 rows, as live sessions do
            await store.write(WriteBatch({s.session_id: s}))
            written += sum(map(len, s.chunk_hashes)) + 4 * len(s.chunk_hashes)
            i += 1
            with contextlib.suppress(FileNotFoundError):
                peak = max(peak, os.stat(str(real) + "-wal").st_size)
        # One check interval of commits may land past the limit before they wait.
        assert peak < sqlite_store.CHECKPOINT_WAL_BYTES + (2 << 20), peak
        assert len(await store.load_all()) == 50
    finally:
        await store.close()
    con = sqlite3.connect(real)  # every commit is in the file, checkpointed or not
    assert con.execute("SELECT count(*) FROM sessions").fetchone()[0] == 50
    con.close()


async def test_a_write_lock_held_elsewhere_does_not_block_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another connection holds the write lock, the write waits for it off the loop:
    the loop runs other work meanwhile, and the lock is let go only after that work ran. A
    write that waited on the loop would hold it until SQLite's busy timeout and fail (done
    before the other work ran) or, timeout-free, hang into the guard."""
    # The wait for the lock ends when the test lets it go, not on SQLite's clock.
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_MS", int(HANG_GUARD_S * 1000))
    path = tmp_path / "s.db"
    store = SqliteSessionStore(str(path))
    await store.open()
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT INTO sessions VALUES ('other', '[]', 0)")
        locked.set()
        release.wait(HANG_GUARD_S)
        con.execute("COMMIT")
        con.close()

    holder = threading.Thread(target=hold_lock)
    holder.start()
    served = asyncio.Event()

    async def other_work() -> None:
        served.set()

    try:
        assert await asyncio.to_thread(locked.wait, HANG_GUARD_S)
        write = asyncio.create_task(store.write(WriteBatch({"s1": session(1, 3)})))
        # Created after the write, so it runs after the write's first step (its inline
        # commit, which finds the lock taken).
        asyncio.create_task(other_work())
        await asyncio.wait_for(served.wait(), HANG_GUARD_S)
        assert not write.done()  # the write waits for the lock, and the loop went on
        release.set()
        await asyncio.wait_for(write, HANG_GUARD_S)
        ids = {s.session_id for s in await store.load_all()}
        assert ids == {"s1", "other"}
    finally:
        release.set()
        holder.join()
        await store.close()


async def test_start_up_folding_waits_for_a_lock_held_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows in the old per-chunk outbox table (ramakv-admin writes them) are folded into
    # evict_log at start-up; another process holding the write lock makes that wait,
    # never fail, even though commits on the loop do not wait for locks.
    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_MS", int(HANG_GUARD_S * 1000))
    folding = threading.Event()
    fold = sqlite_store.fold_legacy_outbox

    def fold_seen(*args: Any) -> Any:
        folding.set()
        return fold(*args)

    monkeypatch.setattr(sqlite_store, "fold_legacy_outbox", fold_seen)
    path = tmp_path / "s.db"
    store = SqliteSessionStore(str(path))
    await store.open()
    await store.close()
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    con.execute("INSERT INTO evict_outbox VALUES ('h1', 'delete')")
    con.execute("BEGIN IMMEDIATE")
    store = SqliteSessionStore(str(path))
    await store.open()
    try:
        load = asyncio.create_task(store.load_outbox())
        # The other process commits once the fold has begun (on the writer thread), not
        # after a delay; the fold waits for it (the busy timeout is the hang guard).
        assert await asyncio.to_thread(folding.wait, HANG_GUARD_S)
        assert not load.done()
        con.execute("COMMIT")
        rows = await asyncio.wait_for(load, HANG_GUARD_S)
    finally:
        await store.close()
        con.close()
    assert [entries for _, _, entries in rows] == [(("h1", "delete"),)]


async def test_a_turn_start_writes_only_its_sessions_state_row(
    start_daemon, make_config, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """turn_start's time is stored, and cheaply: its map is the stored one, so only the
    state row is written; a turn_end in the same batch still writes its new map."""
    maps: list[list[str]] = []
    original = sqlite_store.write_sessions

    def counting(db: Any, upserts: Any, deletes: Any, kept: Any = ()) -> None:
        maps.append(sorted(s.session_id for s in upserts if s.session_id not in kept))
        original(db, upserts, deletes, kept)

    monkeypatch.setattr(sqlite_store, "write_sessions", counting)
    d = await start_daemon(make_config())
    await d.turn_end("a", ["h1", "h2"])
    await d.turn_end("b", ["h3"])
    maps.clear()
    await d.ok("turn_start", session_id="a")
    assert maps == [[]]  # a's state row only
    maps.clear()
    await asyncio.gather(d.ok("turn_start", session_id="b"), d.turn_end("a", ["h1"]))
    assert sorted(m for batch in maps for m in batch) == ["a"]
    stored = {s.session_id: s for s in await d.daemon.store.load_all()}
    assert stored == d.daemon.default.manager.sessions
