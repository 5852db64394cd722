"""The durable floor: the bare server plus the least a durable turn_end must do.

Each turn_end's map replaces the session's in memory (the chunks it dropped found with one set
difference) and is written to SQLite (WAL, synchronous=NORMAL, as the daemon's default) in a
group commit; the answer waits for that commit, as an acknowledged event must. No refcounts,
outbox, trace or checks: what any design on aiohttp and SQLite pays at least, so the ratio
floor ÷ bare bounds what the daemon's ratio can reach. ``floor_server.py PORT``.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import tempfile

from aiohttp import web

from bench.bare_server import ANSWER

MAPS = web.AppKey("maps", dict)


class GroupCommit:
    """Rows written together once per loop pass; each writer waits for its commit."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.rows: list[tuple[str, str]] = []
        self.waiters: list[asyncio.Future[None]] = []
        self.scheduled = False

    def write(self, session_id: str, map_json: str) -> asyncio.Future[None]:
        """Queue one session row; the future is done once it is committed."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self.rows.append((session_id, map_json))
        self.waiters.append(done)
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self.commit)
        return done

    def commit(self) -> None:
        """One transaction for every queued row, then wake their writers."""
        rows, waiters = self.rows, self.waiters
        self.rows, self.waiters, self.scheduled = [], [], False
        self.db.execute("BEGIN")
        self.db.executemany(
            "INSERT INTO sessions (session_id, map_json) VALUES (?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET map_json=excluded.map_json",
            rows,
        )
        self.db.execute("COMMIT")
        for w in waiters:
            w.set_result(None)


COMMITS = web.AppKey("commits", GroupCommit)


async def handle(request: web.Request) -> web.Response:
    """Parse like the bare server, replace the map, wait for its commit, answer."""
    payload = json.loads(await request.read())
    if not isinstance(payload, dict):
        raise web.HTTPBadRequest()
    hashes = payload.get("kv_transfer_params", {}).get("chunk_hashes")
    if isinstance(hashes, list):
        sid = str(payload.get("session_id"))
        maps = request.app[MAPS]
        old = maps.get(sid, ())
        maps[sid] = tuple(hashes)
        set(old).difference(hashes)  # the dropped chunks, which a real store would act on
        await request.app[COMMITS].write(sid, json.dumps(hashes))
    return web.Response(text=ANSWER, content_type="application/json")


def main() -> None:
    """floor_server.py PORT."""
    with tempfile.TemporaryDirectory(prefix="ramakv-floor-") as tmp:
        db = sqlite3.connect(f"{tmp}/floor.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE sessions (session_id TEXT PRIMARY KEY, map_json TEXT NOT NULL)")
        app = web.Application()
        app[MAPS] = {}
        app[COMMITS] = GroupCommit(db)
        app.router.add_post("/event", handle)
        web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)


if __name__ == "__main__":
    main()
