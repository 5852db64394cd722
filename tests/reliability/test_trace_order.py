"""/trace records come out in apply order, and a read never publishes uncommitted state."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.ports import WriteBatch


class FlakyStore(SqliteSessionStore):
    """A real store of which one commit in four fails ("database is locked")."""

    def __init__(self, path: str, thread: bool) -> None:
        super().__init__(path, commit_thread=thread)
        self.rng = random.Random(3)

    async def write(self, batch: WriteBatch) -> None:
        if self.rng.random() < 0.25:
            await asyncio.sleep(0.002)  # in doubt for a while: reads arrive meanwhile
            import sqlite3

            raise sqlite3.OperationalError("database is locked")
        await super().write(batch)


async def collect(ws: Any, until_seq: int) -> list[dict[str, Any]]:
    """Every record up to ``until_seq`` (the snapshot first)."""
    out = []
    while True:
        msg = await ws.receive_json(timeout=120)
        out.append(msg)
        if msg.get("seq", 0) >= until_seq and msg["kind"] != "snapshot":
            return out


@pytest.mark.parametrize("commit_thread", [False, True])
async def test_concurrent_turn_end_and_turn_start_publish_in_apply_order(
    commit_thread: bool, start_daemon: Any, make_config: Any
) -> None:
    cfg = make_config(sqlite_commit_thread=commit_thread)
    d = await start_daemon(cfg, store=FlakyStore(cfg.session_store_path, commit_thread))
    ws = await d.client.ws_connect("/trace?protocol=2")
    rng = random.Random(7)
    sessions = [f"s{i}" for i in range(4)]

    async def client(sid: str) -> None:
        for i in range(60):
            if rng.random() < 0.5:
                await d.post(
                    {
                        "type": "turn_end",
                        "session_id": sid,
                        "kv_transfer_params": {"chunk_hashes": [f"{sid}-{i}", "x"]},
                    }
                )
            elif rng.random() < 0.5:
                # A write (its time is stored): it fails with its commit as turn_end does.
                await d.post({"type": "turn_start", "session_id": sid})
            else:
                await d.post({"type": "session_map", "session_id": sid})

    # Two clients per session: turn_end and turn_start race on the same sessions.
    await asyncio.gather(*(client(sid) for sid in sessions * 2))
    records = await collect(ws, d.daemon.trace.seq)
    seen: dict[str, int] = {}
    checked = 0
    for r in records:
        if r["kind"] != "event" or not r.get("ok"):
            continue
        for sid, s in r["delta"]["sessions"].items():
            if s is None:
                continue
            # turn_count only grows: a record never carries an older one than already out
            # (nor one of a change that was then rolled back).
            assert s["turn_count"] >= seen.get(sid, 0), (sid, s, seen.get(sid))
            seen[sid] = s["turn_count"]
            checked += 1
    # A floor, not a rate: about 480 events, a quarter of the commits failing (turn_starts'
    # too, now that their time is stored), the reads publishing no session.
    assert checked > 150
    final = {sid: s.turn_count for sid, s in d.daemon.default.manager.sessions.items()}
    assert seen == final
    await ws.close()
