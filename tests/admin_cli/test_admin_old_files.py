"""ramakv-admin on a file written before namespaces and fork ids: read and cleaned up as it
is (no migration), and the daemon that opens it next agrees with what the tool did."""

from __future__ import annotations

import io
import json
import sqlite3
import time
from pathlib import Path

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.cli.admin import main
from ramakv_daemon.ports import EvictMode, OutboxEntry

DAY = 86400.0


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out)
    return code, out.getvalue()


def old_file(path: Path) -> None:
    """Two sessions, one with a fork hold kept in its session_state row (the old layout:
    no namespace column, no forks table, per-chunk outbox)."""
    old = time.time() - 3 * DAY
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE sessions (session_id TEXT PRIMARY KEY, map_json TEXT NOT NULL,
                               turn_count INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE session_state (session_id TEXT PRIMARY KEY,
            suspended INTEGER NOT NULL DEFAULT 0, fork_holds_json TEXT NOT NULL DEFAULT '[]',
            last_event_ts REAL NOT NULL DEFAULT 0);
        CREATE TABLE evict_outbox (chunk_hash TEXT PRIMARY KEY, mode TEXT NOT NULL);
        INSERT INTO sessions VALUES ('p', '["a","b"]', 2);
        INSERT INTO sessions VALUES ('q', '["d"]', 1);
    """)
    con.execute("INSERT INTO session_state VALUES ('p', 0, '[[\"a\",\"c\"]]', ?)", (old,))
    con.execute("INSERT INTO session_state VALUES ('q', 0, '[]', ?)", (time.time(),))
    con.commit()
    con.close()


def tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    con = sqlite3.connect(path)
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: sorted(con.execute(f"SELECT * FROM {t}")) for t in sorted(names)}
    finally:
        con.close()


async def reopened(path: Path) -> tuple[list[str], list[tuple[str, ...]], list[OutboxEntry]]:
    """What a daemon loads from the file: session ids, fork holds, waiting evictions."""
    store = SqliteSessionStore(str(path))
    await store.open()
    try:
        sessions = sorted(s.session_id for s in await store.load_all())
        forks = [f.hashes for f in (await store.load_forks()).forks]
        outbox = sorted(e for row in await store.load_outbox() for e in row.entries)
    finally:
        await store.close()
    return sessions, forks, outbox


async def test_an_old_file_is_reported_without_being_changed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_file(path)
    before = tables(path)
    code, text = run("--db", str(path), "report", "--json")
    assert code == 0, text
    row = json.loads(text)["namespaces"][""]
    assert row["sessions"] == {"active": 2, "suspended": 0} and row["open_forks"] == 1
    assert (row["chunks_referenced"], row["references"]) == (4, 5)  # a twice: map and fork
    assert tables(path) == before


async def test_closing_a_session_keeps_its_old_fork_hold(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_file(path)
    code, text = run("--db", str(path), "close-idle", "--older-than", "1d", "--yes")
    assert code == 0 and "close p" in text and "close q" not in text, text
    # Only b is free: the fork still holds a (and c), as the daemon's session_close would.
    assert tables(path)["evict_outbox"] == [("b", "delete")]
    sessions, forks, outbox = await reopened(path)
    assert sessions == ["q"] and forks == [("a", "c")]
    assert outbox == [OutboxEntry("b", EvictMode.DELETE)]
    assert [r[0] for r in tables(path)["session_state"]] == ["q"]  # p's row held only that


async def test_a_purge_ends_old_fork_holds_too(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_file(path)
    code, text = run("--db", str(path), "purge-namespace", "", "--yes")
    assert code == 0 and "end fork -1 of p" in text, text
    sessions, forks, outbox = await reopened(path)
    assert sessions == [] and forks == []
    assert [e.chunk_hash for e in outbox] == ["a", "b", "c", "d"]
    assert {e.mode for e in outbox} == {EvictMode.DELETE}
