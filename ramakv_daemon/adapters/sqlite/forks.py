"""The store's forks table: loading open forks and moving holds of older files into it."""

from __future__ import annotations

import json
import logging
import time

import aiosqlite

from ramakv_daemon.adapters.store_rows import decode_fork
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.ports import LoadedForks

log = logging.getLogger("ramakv.store")

UPSERT_FORK = (
    "INSERT OR REPLACE INTO forks (fork_id, session_id, namespace, hashes_json, created_ts) "
    "VALUES (?, ?, ?, ?, ?)"
)
SELECT_FORKS = (
    "SELECT fork_id, session_id, namespace, hashes_json, created_ts FROM forks ORDER BY fork_id"
)
# Holds of a file written before fork ids (moved into `forks` by the daemon's open()).
SELECT_LEGACY_HOLDS = (
    "SELECT session_id, fork_holds_json, {namespace}, last_event_ts FROM session_state "
    "WHERE fork_holds_json NOT IN ('', '[]')"
)
BUMP_FORK_IDS = (
    "INSERT INTO counters (name, value) VALUES ('next_fork_id', ?) ON CONFLICT(name) "
    "DO UPDATE SET value = max(value, excluded.value)"
)


async def load_forks(db: aiosqlite.Connection) -> LoadedForks:
    """Every open fork, oldest first, and the next fork id to hand out."""
    forks: list[Fork] = []
    async with db.execute(SELECT_FORKS) as cur:
        rows = await cur.fetchall()
    async with db.execute("SELECT value FROM counters WHERE name = 'next_fork_id'") as cur:
        counter = await cur.fetchone()
    next_id = int(counter[0]) if counter else 1
    for row in rows:
        next_id = max(next_id, int(row[0]) + 1)
        fork = decode_fork(*row)
        if fork is not None:
            forks.append(fork)
    return LoadedForks(forks, next_id)


async def migrate_fork_holds(db: aiosqlite.Connection) -> None:
    """Move holds of files written before fork ids (session_state.fork_holds_json) into
    `forks`: fresh ids, created now (a full fork_hold_ttl_s: their real age is unknown)."""
    async with db.execute(SELECT_LEGACY_HOLDS.format(namespace="namespace")) as cur:
        rows = list(await cur.fetchall())
    if not rows:
        return
    async with db.execute("SELECT value FROM counters WHERE name = 'next_fork_id'") as cur:
        found = await cur.fetchone()
    async with db.execute("SELECT coalesce(max(fork_id), 0) FROM forks") as cur:
        top = await cur.fetchone()
    next_id = max(int(found[0]) if found else 1, int(top[0]) + 1 if top else 1)
    now, moved = time.time(), 0
    try:
        for sid, holds_json, ns, _ts in rows:
            try:
                holds = json.loads(holds_json)
                holds = [[str(h) for h in hold] for hold in holds]
            except (ValueError, TypeError) as err:
                log.warning("dropping corrupt fork holds of session %r: %s", sid, err)
                holds = []
            for hold in holds:
                await db.execute(UPSERT_FORK, (next_id, sid, ns or "", json.dumps(hold), now))
                next_id += 1
                moved += 1
            await db.execute(
                "UPDATE session_state SET fork_holds_json = '[]' WHERE session_id = ?",
                (sid,),
            )
            # A session ramakv-admin closed kept its row only for these holds.
            await db.execute(
                "DELETE FROM session_state WHERE session_id = ? "
                "AND session_id NOT IN (SELECT session_id FROM sessions)",
                (sid,),
            )
        await db.execute(BUMP_FORK_IDS, (next_id,))
        await db.commit()
    except BaseException:
        await db.rollback()
        raise
    log.info(
        "session store: moved %d fork holds of %d sessions to the forks table", moved, len(rows)
    )
