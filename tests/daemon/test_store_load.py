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
