"""PostgreSQL store schema: versioned migrations, applied in order at start-up."""

from __future__ import annotations

import logging

import asyncpg

log = logging.getLogger("ramakv.store")

# Serialises daemons starting at once on one database (any fixed 64-bit key of ours).
MIGRATION_LOCK_KEY = 0x72616D616B76  # "ramakv"

# Each entry is one schema version; a version, once released, is never edited: a change
# is a new entry. Every table carries what a node needs to load only its own rows
# (sessions.owner, forks.owner, evict_log.owner, owed_releases.node_id): several daemons
# share one database.
MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "sessions, forks, counters, outbox, answers",
        (
            """CREATE TABLE sessions (
            session_id TEXT PRIMARY KEY,
            namespace TEXT NOT NULL DEFAULT '',
            map_json TEXT NOT NULL,
            turn_count BIGINT NOT NULL DEFAULT 0,
            suspended BOOLEAN NOT NULL DEFAULT FALSE,
            last_event_ts DOUBLE PRECISION NOT NULL DEFAULT 0,
            owner TEXT NOT NULL
        )""",
            "CREATE INDEX sessions_owner ON sessions (owner)",
            """CREATE TABLE forks (
            fork_id BIGINT PRIMARY KEY,
            session_id TEXT NOT NULL,
            namespace TEXT NOT NULL DEFAULT '',
            hashes_json TEXT NOT NULL,
            created_ts DOUBLE PRECISION NOT NULL,
            owner TEXT NOT NULL
        )""",
            "CREATE INDEX forks_owner ON forks (owner)",
            "CREATE TABLE counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
            """CREATE TABLE evict_log (
            owner TEXT NOT NULL,
            id BIGINT NOT NULL,
            namespace TEXT NOT NULL DEFAULT '',
            entries_json TEXT NOT NULL,
            PRIMARY KEY (owner, id)
        )""",
            """CREATE TABLE event_ids (
            event_id TEXT PRIMARY KEY,
            response_json TEXT NOT NULL,
            ts DOUBLE PRECISION NOT NULL
        )""",
            "CREATE INDEX event_ids_ts ON event_ids (ts)",
        ),
    ),
    (
        2,
        "event_ids.request_digest: a retried event_id must carry the same request",
        ("ALTER TABLE event_ids ADD COLUMN request_digest TEXT NOT NULL DEFAULT ''",),
    ),
    (
        3,
        "owed_releases: what a node taken from (or closed for) owes its own cache",
        (
            """CREATE TABLE owed_releases (
            id BIGSERIAL PRIMARY KEY,
            node_id TEXT NOT NULL,
            namespace TEXT NOT NULL DEFAULT '',
            session_id TEXT NOT NULL,
            hashes_json TEXT NOT NULL,
            created TIMESTAMPTZ NOT NULL DEFAULT now()
        )""",
            "CREATE INDEX owed_releases_node ON owed_releases (node_id)",
        ),
    ),
    (
        4,
        "sessions.version: every write is conditional on the version its node read (fencing)",
        (
            "CREATE SEQUENCE session_versions",
            "ALTER TABLE sessions ADD COLUMN version BIGINT NOT NULL DEFAULT 0",
        ),
    ),
)
LATEST_VERSION = MIGRATIONS[-1][0]


async def migrate(con: asyncpg.Connection) -> int:
    """Bring the schema to the latest version in one transaction; the version reached.

    A database written by a newer daemon (a version above ours) is refused rather than
    guessed at.
    """
    async with con.transaction():
        await con.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        await con.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
            "description TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        current = await con.fetchval("SELECT coalesce(max(version), 0) FROM schema_version")
        if current > LATEST_VERSION:
            raise RuntimeError(
                f"schema version {current} is newer than this daemon's {LATEST_VERSION}"
            )
        for version, description, statements in MIGRATIONS:
            if version <= current:
                continue
            for statement in statements:
                await con.execute(statement)
            await con.execute(
                "INSERT INTO schema_version (version, description) VALUES ($1, $2)",
                version,
                description,
            )
            log.info("session store: applied schema version %d (%s)", version, description)
    return LATEST_VERSION
