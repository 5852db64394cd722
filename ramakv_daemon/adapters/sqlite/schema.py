"""The SQLite store's schema, its in-place migrations and its upsert statements."""

from __future__ import annotations

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    map_json TEXT NOT NULL,
    turn_count INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS evict_outbox (
    chunk_hash TEXT PRIMARY KEY,
    mode TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS event_ids (
    event_id TEXT PRIMARY KEY,
    response_json TEXT NOT NULL,
    ts REAL NOT NULL,
    request_digest TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS session_state (
    session_id TEXT PRIMARY KEY,
    suspended INTEGER NOT NULL DEFAULT 0,
    fork_holds_json TEXT NOT NULL DEFAULT '[]',
    last_event_ts REAL NOT NULL DEFAULT 0,
    namespace TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS ns_evict_outbox (
    namespace TEXT NOT NULL,
    chunk_hash TEXT NOT NULL,
    mode TEXT NOT NULL,
    PRIMARY KEY (namespace, chunk_hash)
);
CREATE TABLE IF NOT EXISTS evict_log (
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL DEFAULT '',
    entries_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS forks (
    fork_id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    namespace TEXT NOT NULL DEFAULT '',
    hashes_json TEXT NOT NULL,
    created_ts REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""
# Open forks live in `forks`, apart from their parent's row: a fork outlives its parent's
# close. counters.next_fork_id keeps ids increasing and never reused across restarts (the
# newest fork may have ended, so the largest stored id is not enough). Files written before
# forks had ids kept each session's holds in session_state.fork_holds_json: open() moves
# them into `forks` (fresh ids, created now, so they get a full fork_hold_ttl_s) and
# empties the column, in one transaction.
# The daemon's outbox is evict_log: one row per group commit and namespace holding
# [[hash, mode], ...] (a later row's intent for a hash replaces an earlier one's); a row is
# deleted once none of its entries waits any more. One row per commit instead of one per
# chunk keeps a turn_end that evicts dozens of chunks to one INSERT (and later one DELETE).
# evict_outbox / ns_evict_outbox (one row per chunk) are what ramakv-admin writes while the
# daemon is stopped; open() folds them into evict_log.
# Files written before namespaces existed: session_state gains the column (default '').
# The default namespace's evictions stay in evict_outbox; named namespaces' in ns_evict_outbox.
MIGRATIONS = (
    (
        "session_state",
        "namespace",
        "ALTER TABLE session_state ADD COLUMN namespace TEXT NOT NULL DEFAULT ''",
    ),
    # The digest of the request an answer belongs to ('' in older files: unknown).
    (
        "event_ids",
        "request_digest",
        "ALTER TABLE event_ids ADD COLUMN request_digest TEXT NOT NULL DEFAULT ''",
    ),
)

UPSERT_SESSION = (
    "INSERT INTO sessions (session_id, map_json, turn_count) VALUES (?, ?, ?) "
    "ON CONFLICT(session_id) DO UPDATE SET map_json=excluded.map_json, "
    "turn_count=excluded.turn_count"
)
UPSERT_STATE = (
    "INSERT INTO session_state (session_id, suspended, last_event_ts, namespace) "
    "VALUES (?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
    "suspended=excluded.suspended, last_event_ts=excluded.last_event_ts, "
    "namespace=excluded.namespace"
)

# Every stored session with its state; {namespace} is ``st.namespace``, or ``''`` for a
# file the daemon has not migrated yet (ramakv-admin reads those without changing them).
SELECT_SESSIONS = (
    "SELECT s.session_id, s.map_json, s.turn_count, st.suspended, st.last_event_ts, "
    "{namespace} FROM sessions s LEFT JOIN session_state st ON st.session_id = s.session_id"
)


def existing_sessions(db: sqlite3.Connection, session_ids: list[str]) -> list[str]:
    """Those of ``session_ids`` that have a stored row (in chunks: SQLite's variable limit)."""
    found: list[str] = []
    for i in range(0, len(session_ids), 500):
        part = session_ids[i : i + 500]
        marks = ",".join("?" * len(part))
        rows = db.execute(f"SELECT session_id FROM sessions WHERE session_id IN ({marks})", part)
        found.extend(r[0] for r in rows)
    return found
