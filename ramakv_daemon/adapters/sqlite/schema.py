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
CREATE TABLE IF NOT EXISTS session_codes (
    session_id TEXT PRIMARY KEY,
    codes BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS session_codes_follow_map
AFTER UPDATE OF map_json ON sessions WHEN new.map_json IS NOT old.map_json
BEGIN DELETE FROM session_codes WHERE session_id = new.session_id; END;
CREATE TRIGGER IF NOT EXISTS session_codes_follow_delete
AFTER DELETE ON sessions
BEGIN DELETE FROM session_codes WHERE session_id = old.session_id; END;
"""
# session_codes: a map whose every hash is canonical (core.packed), as little-endian int64
# codes, 8 bytes a hash: start-up reads these instead of decoding map_json (at 50,000 x 512,
# ~17 s of JSON and hex parsing against a copy of bytes). map_json stays the map's record for
# every other reader. The triggers keep the two in step whatever writes sessions (an older
# daemon, ramakv-admin, a script): a changed or deleted map drops its codes, and the daemon
# writes the new codes after the map, in the same transaction.
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

UPSERT_CODES = (
    "INSERT INTO session_codes (session_id, codes) VALUES (?, ?) "
    "ON CONFLICT(session_id) DO UPDATE SET codes=excluded.codes"
)

# Every stored session with its state, the map as its codes where stored (bytes) else its
# JSON (str); COALESCE reads map_json only for a row without codes. {namespace} is
# ``st.namespace``, or ``''`` for a file the daemon has not migrated yet (ramakv-admin reads
# those without changing them); such a file has no session_codes either (WITHOUT_CODES).
SELECT_SESSIONS = (
    "SELECT s.session_id, {map}, s.turn_count, st.suspended, st.last_event_ts, "
    "{namespace} FROM sessions s LEFT JOIN session_state st ON st.session_id = s.session_id"
    "{join}"
)
WITH_CODES = {
    "map": "COALESCE(c.codes, s.map_json)",
    "join": " LEFT JOIN session_codes c ON c.session_id = s.session_id",
}
WITHOUT_CODES = {"map": "s.map_json", "join": ""}


def existing_sessions(db: sqlite3.Connection, session_ids: list[str]) -> list[str]:
    """Those of ``session_ids`` that have a stored row (in chunks: SQLite's variable limit)."""
    found: list[str] = []
    for i in range(0, len(session_ids), 500):
        part = session_ids[i : i + 500]
        marks = ",".join("?" * len(part))
        rows = db.execute(f"SELECT session_id FROM sessions WHERE session_id IN ({marks})", part)
        found.extend(r[0] for r in rows)
    return found
