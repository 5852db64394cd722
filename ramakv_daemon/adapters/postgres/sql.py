"""The PostgreSQL store's statements (kept apart from the adapter's control flow)."""

from __future__ import annotations

RELEASE_CHANNEL = "ramakv_release"

# FENCING (docs/scale-out.md): every session row carries a version, taken from one
# sequence by every write and every claim, so a version is never reused, not even by a row
# deleted and created again. A node writes a row only at the version it last loaded,
# claimed or wrote (`expected`), in the statement that writes it: a row another node took,
# wrote or deleted meanwhile is left as it is, and the store then fails the whole
# transaction (StoreFenced). A write never takes a session over: only CLAIM_SESSION does.
# One statement per commit for all of its sessions (arrays, not a row per call): rows this
# node holds are updated at their expected version; new ones (`expected` NULL) are inserted
# only where no row exists. Both return what they wrote, with the new version; a session
# missing from the result was fenced. The UPDATE's row lock makes a concurrent claim wait
# (or, after it, re-reads the row and finds another version). A NULL map_json keeps the
# stored map (an update whose map is unchanged: a turn_start's time); an insert has one.
UPSERT_SESSIONS = """
WITH incoming AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bool[],
                         $6::float8[], $7::bigint[])
        AS t(session_id, namespace, map_json, turn_count, suspended, last_event_ts, expected)
), updated AS (
    UPDATE sessions s SET namespace = i.namespace,
        map_json = COALESCE(i.map_json, s.map_json), turn_count = i.turn_count,
        suspended = i.suspended, last_event_ts = i.last_event_ts,
        version = nextval('session_versions')
    FROM incoming i
    WHERE s.session_id = i.session_id AND i.expected IS NOT NULL
        AND s.version = i.expected AND s.owner = $8
    RETURNING s.session_id, s.version
), inserted AS (
    INSERT INTO sessions (session_id, namespace, map_json, turn_count, suspended,
                          last_event_ts, owner, version)
    SELECT session_id, namespace, map_json, turn_count, suspended, last_event_ts, $8,
           nextval('session_versions')
    FROM incoming WHERE expected IS NULL
    ON CONFLICT (session_id) DO NOTHING
    RETURNING session_id, version
)
SELECT session_id, version FROM updated UNION ALL SELECT session_id, version FROM inserted
"""
# A node deletes only a row it holds at the version it expects; what it deleted comes back
# (a session missing was fenced: another node took, wrote or deleted it).
DELETE_SESSIONS = """
DELETE FROM sessions s USING unnest($1::text[], $2::bigint[]) AS d(session_id, expected)
WHERE s.session_id = d.session_id AND s.version = d.expected AND s.owner = $3
RETURNING s.session_id
"""
# Take one session now (an event arrived for a session not held here): the row lock, a new
# version (the old owner's next write is fenced), and the row as it was, so the new owner
# starts from the old owner's map. A row this node owns already comes back as it is
# stored (owed nothing): an adopt rolled back with a failed commit is redone from it.
CLAIM_SESSION = """
WITH prev AS (
    SELECT session_id, owner, namespace, map_json FROM sessions
    WHERE session_id = $1 FOR UPDATE
), owed AS (
    INSERT INTO owed_releases (node_id, namespace, session_id, hashes_json)
    SELECT owner, namespace, session_id, map_json FROM prev WHERE owner <> $2
), up AS (
    UPDATE sessions s SET owner = $2, version = nextval('session_versions') FROM prev
    WHERE s.session_id = prev.session_id
    RETURNING s.session_id, s.map_json, s.turn_count, s.suspended, s.last_event_ts,
              s.namespace, s.version
)
SELECT up.*, prev.owner AS previous_owner FROM up JOIN prev USING (session_id)
"""
# OWED_NOTE: a node that loses a session (taken over, or closed by ramakv-admin) owes its
# own cache the release of that map; a live node does it from memory and then drops its
# rows, a node that held nothing in memory (down, restarted) evicts from the rows what
# none of its sessions and forks references, writing those intents to its outbox in the
# transaction that deletes the rows (docs/scale-out.md).
SELECT_OWED = (
    "SELECT id, namespace, session_id, hashes_json FROM owed_releases "
    "WHERE node_id = $1 ORDER BY id"
)
DELETE_OWED = "DELETE FROM owed_releases WHERE node_id = $1 AND id = ANY($2::bigint[])"
DELETE_OWED_OF = "DELETE FROM owed_releases WHERE node_id = $1 AND session_id = ANY($2::text[])"
SELECT_OWNED = (
    "SELECT session_id, map_json, turn_count, suspended, last_event_ts, namespace, version "
    "FROM sessions WHERE owner = $1"
)
UPSERT_FORK = (
    "INSERT INTO forks (fork_id, session_id, namespace, hashes_json, created_ts, owner) "
    "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (fork_id) DO UPDATE SET "
    "session_id = excluded.session_id, namespace = excluded.namespace, "
    "hashes_json = excluded.hashes_json, created_ts = excluded.created_ts "
    "WHERE forks.owner = excluded.owner RETURNING fork_id"
)  # no row back: another node holds that id (its counter ran ahead of ours)
# A node ends only forks it holds: one a takeover moved to another node stays there.
DELETE_FORKS = "DELETE FROM forks WHERE fork_id = ANY($1::bigint[]) AND owner = $2"
# A claim's forks move with their session (same transaction as CLAIM_SESSION): the open
# forks of the session the previous owner held, re-owned by the claiming node.
# Their holds are owed by the previous owner as well.
CLAIM_FORKS = """
WITH moved AS (
    UPDATE forks SET owner = $2 WHERE session_id = $1 AND owner = $3::text
    RETURNING fork_id, session_id, namespace, hashes_json, created_ts
), owed AS (
    INSERT INTO owed_releases (node_id, namespace, session_id, hashes_json)
    SELECT $3::text, namespace, session_id, hashes_json FROM moved
)
SELECT * FROM moved
"""
SELECT_VERSIONS = "SELECT session_id, version FROM sessions WHERE session_id = ANY($1::text[])"
# An own row's claim: this node's open forks of the session (an adopt rolled back lost them).
SELECT_FORKS_OF = (
    "SELECT fork_id, session_id, namespace, hashes_json, created_ts FROM forks "
    "WHERE session_id = $1 AND owner = $2 ORDER BY fork_id"
)
SELECT_FORK_OWNERS_OF = "SELECT fork_id, owner FROM forks WHERE fork_id = ANY($1::bigint[])"
SELECT_FORKS = (
    "SELECT fork_id, session_id, namespace, hashes_json, created_ts FROM forks "
    "WHERE owner = $1 ORDER BY fork_id"
)
# Above every id any node handed out (stored counter, or a fork still open anywhere).
NEXT_FORK_ID = (
    "SELECT greatest((SELECT value FROM counters WHERE name = 'next_fork_id'), "
    "(SELECT max(fork_id) + 1 FROM forks), 1)"
)
# One atomic step under the counter row's lock, so daemons forking at once on one database
# never get the same id; it also starts above any fork still open (ids from before it).
TAKE_FORK_ID = (
    "INSERT INTO counters (name, value) "
    "VALUES ('next_fork_id', (SELECT coalesce(max(fork_id), 0) + 2 FROM forks)) "
    "ON CONFLICT (name) DO UPDATE SET value = greatest(counters.value, "
    "(SELECT coalesce(max(fork_id), 0) + 1 FROM forks)) + 1 RETURNING value - 1"
)
BUMP_FORK_IDS = (
    "INSERT INTO counters (name, value) VALUES ('next_fork_id', $1) ON CONFLICT (name) "
    "DO UPDATE SET value = greatest(counters.value, excluded.value)"
)
INSERT_OUTBOX = "INSERT INTO evict_log (owner, id, namespace, entries_json) VALUES ($1, $2, $3, $4)"
DELETE_OUTBOX = "DELETE FROM evict_log WHERE owner = $1 AND id = ANY($2::bigint[])"
SELECT_OUTBOX = "SELECT id, namespace, entries_json FROM evict_log WHERE owner = $1 ORDER BY id"
UPSERT_ANSWER = (
    "INSERT INTO event_ids (event_id, response_json, ts, request_digest) "
    "VALUES ($1, $2, $3, $4) ON CONFLICT (event_id) DO UPDATE SET "
    "response_json = excluded.response_json, ts = excluded.ts, "
    "request_digest = excluded.request_digest"
)
PRUNE_ANSWERS = "DELETE FROM event_ids WHERE ts < $1"
SELECT_ANSWERS = (
    "SELECT event_id, response_json, request_digest FROM event_ids "
    "ORDER BY ts DESC, event_id DESC LIMIT $1"
)
# ramakv-admin's close: only a row unchanged since the plan (same last event), returning
# the owner to tell; the row lock makes an owner's concurrent upsert wait, then insert anew.
ADMIN_DELETE_SESSION = """
WITH gone AS (
    DELETE FROM sessions WHERE session_id = $1 AND last_event_ts = $2
    RETURNING owner, namespace, session_id, map_json
), owed AS (
    INSERT INTO owed_releases (node_id, namespace, session_id, hashes_json)
    SELECT owner, namespace, session_id, map_json FROM gone
)
SELECT owner FROM gone
"""
SELECT_FORK_OWNERS = "SELECT fork_id, owner FROM forks"
# ramakv-admin reads every node's rows.
SELECT_ALL_SESSIONS = (
    "SELECT session_id, map_json, turn_count, suspended, last_event_ts, namespace, owner "
    "FROM sessions"
)
SELECT_ALL_FORKS = (
    "SELECT fork_id, session_id, namespace, hashes_json, created_ts FROM forks ORDER BY fork_id"
)
SELECT_ALL_OUTBOX = "SELECT namespace, entries_json FROM evict_log"
# The store's tables; plain VACUUM takes no lock that stops the daemons' reads and writes.
VACUUM_TABLES = "VACUUM (ANALYZE) sessions, forks, counters, evict_log, event_ids, owed_releases"
NOTIFY_RELEASE = "SELECT pg_notify($1, $2)"
