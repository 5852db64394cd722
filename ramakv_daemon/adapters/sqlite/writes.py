"""The SQLite store's session rows as one commit writes them: map, codes, state."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Collection, Sequence

import orjson

from ramakv_daemon.adapters.sqlite.schema import UPSERT_CODES, UPSERT_SESSION, UPSERT_STATE
from ramakv_daemon.adapters.store_rows import codes_rows
from ramakv_daemon.core.packed import text_for_store
from ramakv_daemon.core.session import Session

log = logging.getLogger("ramakv.store")


def write_sessions(
    db: sqlite3.Connection,
    upserts: Sequence[Session],
    deletes: Sequence[tuple[str]],
    kept: Collection[str] = (),
) -> None:
    """Inside the caller's transaction: each upsert's map (JSON, then its codes where it
    packs) and state; each delete's rows (the trigger drops its codes). ``kept``: stored
    sessions whose map is unchanged: only their state row is written (a turn_start's
    time costs one small row, not its whole map again)."""
    if upserts:
        maps = [s for s in upserts if s.session_id not in kept] if kept else upserts
        db.executemany(
            UPSERT_SESSION,
            [
                (s.session_id, orjson.dumps(text_for_store(s.chunk_hashes)).decode(), s.turn_count)
                for s in maps
            ],
        )
        # After the maps: their trigger dropped the codes of every changed map.
        db.executemany(UPSERT_CODES, codes_rows(maps))
        db.executemany(
            UPSERT_STATE,
            [(s.session_id, int(s.suspended), s.last_event_ts, s.namespace) for s in upserts],
        )
    if deletes:
        db.executemany("DELETE FROM sessions WHERE session_id = ?", deletes)
        db.executemany("DELETE FROM session_state WHERE session_id = ?", deletes)


def store_codes(db: sqlite3.Connection, rows: list[tuple[str, bytes]]) -> None:
    """Write the codes of maps that were loaded from their JSON (a store from before
    session_codes, or rows another writer changed), so the next start reads them.

    Called before the daemon serves: the rows are what was just read, and it holds the
    store's lock, so nothing can have changed them since.
    """
    t0 = time.perf_counter()
    db.execute("BEGIN IMMEDIATE")
    try:
        db.executemany(UPSERT_CODES, rows)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    # Copied into the file now, before serving: else the first commit after listening
    # waited for the checkpoint of this whole WAL (1.3 s at 50,000 x 512).
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    log.info(
        "stored the packed codes of %d maps loaded from JSON in %.2fs: the next start reads "
        "them instead",
        len(rows),
        time.perf_counter() - t0,
    )
