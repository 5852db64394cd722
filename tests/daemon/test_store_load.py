"""The batched start-up load: every row across batch boundaries, corrupt rows skipped."""

from __future__ import annotations

import gc
import json
import logging
import sqlite3
from pathlib import Path

import pytest

from ramakv_daemon.adapters.sqlite import store as sqlite_store
from ramakv_daemon.adapters.sqlite.store import SCHEMA, SqliteSessionStore
from ramakv_daemon.ports import WriteBatch

N = 2 * sqlite_store._LOAD_BATCH + 7  # three batches, the last one short
CORRUPT = {sqlite_store._LOAD_BATCH - 1: "[1, 2]", sqlite_store._LOAD_BATCH: "not json"}


def write(path: Path) -> None:
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    rows = [
        (f"s{i:04d}", CORRUPT.get(i, json.dumps([f"h{i}", "sys", f"h{i}"])), i) for i in range(N)
    ]
    con.executemany(
        "INSERT INTO sessions (session_id, map_json, turn_count) VALUES (?, ?, ?)", rows
    )
    con.execute(
        "INSERT INTO session_state (session_id, suspended, fork_holds_json) "
        "VALUES ('s0003', 1, '[[\"x\", \"y\"]]')"
    )
    con.commit()
    con.close()


@pytest.mark.parametrize("gc_on", [True, False])
async def test_load_all_reads_every_batch_and_skips_corrupt_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, gc_on: bool
) -> None:
    db = tmp_path / "s.db"
    write(db)
    store = SqliteSessionStore(str(db))
    await store.open()
    was = gc.isenabled()
    (gc.enable if gc_on else gc.disable)()
    try:
        with caplog.at_level(logging.WARNING, logger="ramakv.store"):
            sessions = await store.load_all()
        # The collector is left as it was found.
        assert gc.isenabled() is gc_on
        forks, next_id = await store.load_forks()
    finally:
        (gc.enable if was else gc.disable)()
        await store.close()
    by_id = {s.session_id: s for s in sessions}
    assert len(sessions) == N - len(CORRUPT)
    assert set(by_id) == {f"s{i:04d}" for i in range(N) if i not in CORRUPT}
    assert by_id["s0500"].chunk_hashes == ("h500", "sys", "h500")
    assert by_id["s0500"].turn_count == 500
    assert by_id["s0003"].suspended
    # The hold written before fork ids was moved to the forks table at open().
    assert [(f.fork_id, f.session_id, f.hashes) for f in forks] == [(1, "s0003", ("x", "y"))]
    assert next_id == 2
    skipped = sorted(r.getMessage() for r in caplog.records if "skipping" in r.getMessage())
    assert len(skipped) == len(CORRUPT)


async def _load(db: Path) -> dict[str, object]:
    store = SqliteSessionStore(str(db))
    await store.open()
    try:
        return {s.session_id: s.chunk_hashes for s in await store.load_all()}
    finally:
        await store.close()


def _codes(db: Path) -> dict[str, bytes]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT session_id, codes FROM session_codes"))
    finally:
        con.close()


async def test_packable_maps_are_stored_as_codes_and_load_packed(tmp_path: Path) -> None:
    """The daemon writes a map of canonical hashes twice (JSON, codes); start-up reads the
    codes. A map with another hash has no codes row and loads from its JSON."""
    from ramakv_daemon.core.packed import PackedMap, pack_for_store
    from ramakv_daemon.core.session import Session

    db = tmp_path / "s.db"
    store = SqliteSessionStore(str(db))
    await store.open()
    canonical = ("-742f18cebc2f4c4d", "77b73c60858dca07", "0")
    await store.write(
        WriteBatch({"p": Session("p", canonical, 2), "t": Session("t", ("h1", "a"), 1)})
    )
    await store.close()
    assert _codes(db) == {"p": pack_for_store(canonical)}
    loaded = await _load(db)
    assert isinstance(loaded["p"], PackedMap) and loaded["p"] == canonical
    assert loaded["t"] == ("h1", "a") and isinstance(loaded["t"], tuple)


async def test_a_map_rewritten_by_another_writer_drops_its_codes(tmp_path: Path) -> None:
    """A script or an older daemon that rewrites map_json (or deletes the row) leaves no
    stale codes behind: the triggers drop them, and start-up reads the new JSON."""
    from ramakv_daemon.core.session import Session

    db = tmp_path / "s.db"
    store = SqliteSessionStore(str(db))
    await store.open()
    await store.write(WriteBatch({"p": Session("p", ("a", "b"), 1), "q": Session("q", ("c",), 1)}))
    await store.close()
    assert set(_codes(db)) == {"p", "q"}
    con = sqlite3.connect(db)
    con.execute('UPDATE sessions SET map_json = \'["a", "b", "d"]\' WHERE session_id = \'p\'')
    con.execute("UPDATE sessions SET turn_count = 9 WHERE session_id = 'q'")  # map unchanged
    con.commit()
    assert set(_codes(db)) == {"q"}
    con.execute("DELETE FROM sessions WHERE session_id = 'q'")
    con.commit()
    con.close()
    assert _codes(db) == {}
    assert await _load(db) == {"p": ("a", "b", "d")}


async def test_corrupt_codes_are_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ramakv_daemon.core.session import Session

    db = tmp_path / "s.db"
    store = SqliteSessionStore(str(db))
    await store.open()
    await store.write(WriteBatch({"p": Session("p", ("a",), 1), "q": Session("q", ("b",), 1)}))
    await store.close()
    con = sqlite3.connect(db)
    con.execute("UPDATE session_codes SET codes = x'0102' WHERE session_id = 'p'")
    con.commit()
    con.close()
    with caplog.at_level(logging.WARNING, logger="ramakv.store"):
        assert await _load(db) == {"q": ("b",)}
    assert any("'p'" in r.getMessage() and "2 bytes" in r.getMessage() for r in caplog.records)


async def test_a_store_from_before_codes_gets_them_at_its_first_start(tmp_path: Path) -> None:
    """Maps written as JSON only (an older daemon): the first load packs them and stores
    their codes before serving; the next load reads the codes, the same maps."""
    db = tmp_path / "s.db"
    con = sqlite3.connect(db)
    con.executescript(SCHEMA)
    rows = [("p", json.dumps(["-1f", "2e"]), 1), ("t", json.dumps(["h1"]), 1)]
    con.executemany(
        "INSERT INTO sessions (session_id, map_json, turn_count) VALUES (?, ?, ?)", rows
    )
    con.execute("DELETE FROM session_codes")
    con.commit()
    con.close()
    first = await _load(db)
    assert set(_codes(db)) == {"p"}
    assert await _load(db) == first == {"p": ("-1f", "2e"), "t": ("h1",)}
