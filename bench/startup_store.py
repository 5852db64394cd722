"""The start-up benchmark's store: N sessions x (64 shared + 448 own) hashes, streamed into
SQLite a batch at a time (never the whole map list in memory), cached under /tmp.

As the daemon writes it (each map's JSON and its packed codes, adapters/sqlite/schema.py),
or with ``codes=False`` as a daemon from before session_codes did (JSON only).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from ramakv_daemon.adapters.sqlite.schema import UPSERT_CODES
from ramakv_daemon.adapters.sqlite.store import SCHEMA
from ramakv_daemon.core.packed import pack_for_store

SHARED, OWN = 64, 448
BATCH = 1000


def engine_hash(raw: bytes) -> str:
    """8 random bytes as the engine writes a hash: signed 64-bit, lowercase hex."""
    v = int.from_bytes(raw, "little", signed=True)
    return f"-{-v:x}" if v < 0 else f"{v:x}"


def build(
    path: Path, n_sessions: int, shared: int = SHARED, own: int = OWN, codes: bool = True
) -> Path:
    """Write the store at ``path`` unless a complete one is there (its size in the name)."""
    done = path.with_suffix(".done")
    what = f"{n_sessions} {shared} {own} {'codes' if codes else 'json'}"
    if path.exists() and done.exists() and done.read_text() == what:
        return path
    for p in (path, done, Path(f"{path}-wal"), Path(f"{path}-shm")):
        p.unlink(missing_ok=True)
    system = [engine_hash(os.urandom(8)) for _ in range(shared)]
    con = sqlite3.connect(path)
    try:
        con.executescript(SCHEMA)
        for start in range(0, n_sessions, BATCH):
            rows, packed = [], []
            for i in range(start, min(n_sessions, start + BATCH)):
                blob = os.urandom(8 * own)
                hashes = system + [engine_hash(blob[j : j + 8]) for j in range(0, len(blob), 8)]
                rows.append((f"agent-{i}", json.dumps(hashes), 3))
                if codes:
                    packed.append((f"agent-{i}", pack_for_store(hashes)))
            con.executemany(
                "INSERT INTO sessions (session_id, map_json, turn_count) VALUES (?, ?, ?)", rows
            )
            con.executemany(UPSERT_CODES, packed)
        con.commit()
    finally:
        con.close()
    done.write_text(what)
    return path
