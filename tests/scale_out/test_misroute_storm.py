"""A seeded misroute storm over two nodes on one database, checked against a model.

Six sessions run their events one after another (a client waits for each reply), all at
once; every event goes to a node drawn by the seed, so sessions move all the time. In
each phase the seed also makes some nodes deaf (the server process of their LISTEN
connection is stopped, support.pg_nodes.unheard): a takeover is then known to the old node
only through the fence. Afterwards: every acknowledged change is in the database (no turn,
suspend, fork or fork end undone), each node holds exactly what it owns (no stranded fork),
its refcounts equal what it holds, and every fork the model has open ends where it is.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from support.daemon_proc import DaemonProcess
from support.pg_nodes import (
    check_refcounts_match_owned,
    listener_pid,
    sql,
    stop_listener,
    until,
)
from support.postgres import PostgresServer

SESSIONS = [f"s{i}" for i in range(6)]
PHASES = 4
STEPS = 10  # per session and phase
RETRIES = 5  # a 503 (nothing done) is sent again, as a client would


@dataclass
class Model:
    """One session as its acknowledged events left it."""

    exists: bool = False
    hashes: list[str] = field(default_factory=list)
    turns: int = 0
    suspended: bool = False
    forks: dict[int, tuple[str, ...]] = field(default_factory=dict)


def send(d: DaemonProcess, body: dict[str, Any]) -> dict[str, Any]:
    for _ in range(RETRIES):
        status, reply = d.post(body, timeout=60)
        if status != 503:
            assert status == 200, (status, reply)
            return reply
    raise AssertionError(f"{body} answered 503 {RETRIES} times: {reply}")


def step(rng: random.Random, sid: str, m: Model, nodes: list[DaemonProcess], n: int) -> None:
    """One event for ``sid`` to a drawn node, its reply checked and the model moved."""
    d = rng.choice(nodes)
    choices = ["turn_end", "turn_end", "turn_start"]
    if m.exists:
        choices += ["session_suspend", "snapshot_restore"]
        if not m.suspended:
            choices += ["session_fork", "session_fork"]
        if not m.forks:
            choices.append("session_close")
    if m.forks:
        choices += ["session_fork_end", "session_fork_end"]
    kind = rng.choice(choices)
    if kind == "turn_end":
        keep = m.hashes[: rng.randint(0, len(m.hashes))] if m.exists else []
        hashes = ["sys", *[h for h in keep if h != "sys"], f"{sid}-{n}"]
        reply = send(
            d,
            {"type": kind, "session_id": sid, "kv_transfer_params": {"chunk_hashes": hashes}},
        )
        assert reply["ok"] and reply["data"]["map_updated"], reply
        m.exists, m.hashes, m.turns, m.suspended = True, hashes, m.turns + 1, False
    elif kind == "turn_start":
        assert send(d, {"type": kind, "session_id": sid})["ok"]
    elif kind == "session_suspend":
        reply = send(d, {"type": kind, "session_id": sid})
        assert reply["ok"] and reply["data"]["suspended"], reply
        m.suspended = True
    elif kind == "snapshot_restore":
        reply = send(d, {"type": kind, "session_id": sid})
        assert reply["ok"], reply
        assert reply["data"]["prefetch_count"] == len(set(m.hashes)), (reply, m)
        m.suspended = False
    elif kind == "session_fork":
        reply = send(d, {"type": kind, "session_id": sid})
        assert reply["ok"], reply
        m.forks[reply["data"]["fork_id"]] = tuple(dict.fromkeys(m.hashes))
    elif kind == "session_fork_end":
        fid = rng.choice(sorted(m.forks))
        reply = send(d, {"type": kind, "session_id": sid, "fork_id": fid})
        assert reply["ok"] and reply["data"]["fork_end"], (reply, fid, d.url)
        del m.forks[fid]
    else:
        reply = send(d, {"type": kind, "session_id": sid})
        assert reply["ok"] and reply["data"]["closed"], reply
        m.exists, m.hashes, m.turns, m.suspended = False, [], 0, False


def phase(seed: int, p: int, models: dict[str, Model], nodes: list[DaemonProcess]) -> None:
    """Every session's steps of phase ``p``, the sessions at once (one thread each)."""
    errors: list[BaseException] = []

    def run(sid: str) -> None:
        rng = random.Random(f"{seed}/{sid}/{p}")
        try:
            for n in range(STEPS):
                step(rng, sid, models[sid], nodes, p * STEPS + n)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(sid,)) for sid in SESSIONS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def held_ids(d: DaemonProcess) -> tuple[set[str], set[int]]:
    rows = d.event("list_sessions", limit=1000)["data"]["sessions"]
    sessions = {r["session_id"] for r in rows if r["state"] != "closed"}
    forks = {f["fork_id"] for r in rows for f in r.get("forks", ())}
    return sessions, forks


@pytest.mark.parametrize("seed", [7, 24])
async def test_a_misroute_storm_loses_no_acknowledged_change_and_strands_no_fork(
    seed: int,
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
) -> None:
    url = postgres_server.create_database()
    # No periodic check: a node learns of a takeover by its notification or by the fence.
    config = {"session_store_url": url, "ownership_check_s": 3600.0}
    nodes = [daemon_proc_factory(config={**config, "node_id": n}) for n in ("a", "b")]
    pids = {d: await listener_pid(url, n) for d, n in zip(nodes, ("a", "b"), strict=True)}
    models = {sid: Model() for sid in SESSIONS}
    draw = random.Random(seed)
    for p in range(PHASES):
        deaf = [d for d in nodes if draw.random() < 0.6]
        for d in deaf:
            await stop_listener(url, pids[d])
        try:
            await asyncio.to_thread(phase, seed, p, models, nodes)
        finally:
            for d in deaf:
                os.kill(pids[d], signal.SIGCONT)

    # Zero acknowledged changes lost: the rows are the model's.
    rows = await sql(url, "SELECT session_id, owner, map_json, turn_count, suspended FROM sessions")
    stored = {r["session_id"]: r for r in rows}
    live = {sid: m for sid, m in models.items() if m.exists}
    assert set(stored) == set(live)
    for sid, m in live.items():
        r = stored[sid]
        assert (orjson.loads(r["map_json"]), r["turn_count"], r["suspended"]) == (
            m.hashes,
            m.turns,
            m.suspended,
        ), sid
    fork_rows = await sql(url, "SELECT fork_id, session_id, owner, hashes_json FROM forks")
    open_forks = {fid: (sid, h) for sid, m in models.items() for fid, h in m.forks.items()}
    assert {
        r["fork_id"]: (r["session_id"], tuple(orjson.loads(r["hashes_json"]))) for r in fork_rows
    } == open_forks
    # Each fork's row belongs to its session's owner (it moved with every claim).
    assert all(r["owner"] == stored[r["session_id"]]["owner"] for r in fork_rows)

    # Once the notifications are heard, each node holds exactly what it owns.
    owner_of = {sid: r["owner"] for sid, r in stored.items()}
    fork_owner = {r["fork_id"]: r["owner"] for r in fork_rows}

    async def settled() -> bool:
        for d, name in zip(nodes, ("a", "b"), strict=True):
            sessions, forks = held_ids(d)
            if sessions != {s for s, o in owner_of.items() if o == name}:
                return False
            if forks != {f for f, o in fork_owner.items() if o == name}:
                return False
        return True

    await until(settled, "each node to hold exactly what it owns")
    for d in nodes:
        await check_refcounts_match_owned(d)
    fences = sum(d.log().count("fenced write:") for d in nodes)
    assert fences > 0, "the storm never reached a stale copy"

    # Every open fork ends, wherever its fork_end is sent: none is stranded.
    for fid, (sid, _) in sorted(open_forks.items()):
        reply = send(
            draw.choice(nodes), {"type": "session_fork_end", "session_id": sid, "fork_id": fid}
        )
        assert reply["ok"] and reply["data"]["fork_end"], (fid, reply)
    assert await sql(url, "SELECT fork_id FROM forks") == []

    # A fork_end sent to the node that does not hold the fork takes its session over; the
    # holder lets go of its copy when it hears of that (a notification, after the reply):
    # waited for, not read at once (1 run in ~35 read a fork still held there).
    async def no_fork_held() -> bool:
        return all(held_ids(d)[1] == set() for d in nodes)

    await until(no_fork_held, "every node to let go of the ended forks")
    for d in nodes:
        await check_refcounts_match_owned(d)
