"""Sessions moved back and forth between two real daemons under load, each steering its
own (stand-in) LMCache; then kill -9 of one mid-load."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import pytest

TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from fakes.lmcache_server import FakeLMCacheServer  # noqa: E402
from support.daemon_proc import DaemonProcess, trace_snapshot  # noqa: E402
from support.postgres import PostgresServer  # noqa: E402

from ramakv_daemon.core.manager import recompute_refcounts  # noqa: E402
from ramakv_daemon.core.session import Session  # noqa: E402

MOVING = [f"m{i}" for i in range(6)]
ROUNDS = 16


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeLMCacheServer, FakeLMCacheServer]]:
    async with FakeLMCacheServer() as fa, FakeLMCacheServer() as fb:
        yield fa, fb


async def post(http: aiohttp.ClientSession, d: DaemonProcess, body: dict) -> dict:
    async with http.post(d.url + "/event", json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


def moving_map(sid: str, r: int) -> list[str]:
    return ["sys", f"{sid}-r{r}", f"{sid}-r{r - 1}"]


async def owned(http: aiohttp.ClientSession, d: DaemonProcess) -> set[str]:
    data = (await post(http, d, {"type": "list_sessions", "limit": 1000}))["data"]
    return {r["session_id"] for r in data["sessions"]}


async def wait_disjoint(http: aiohttp.ClientSession, a: DaemonProcess,
                        b: DaemonProcess) -> None:
    """Until no session is held by both nodes (every takeover was released)."""
    deadline = time.monotonic() + 60
    while (await owned(http, a)) & (await owned(http, b)):
        assert time.monotonic() < deadline, "a taken session was never released"
        await asyncio.sleep(0.02)


async def check_node(d: DaemonProcess, fake: FakeLMCacheServer) -> None:
    """Refcounts equal those recomputed from what the node owns; no eviction it sent is for
    a chunk a session it owns now references, nor for the chunk every node shares."""
    snap = await trace_snapshot(d.url)
    sessions = [Session(s["session_id"], tuple(s["chunk_hashes"]),
                        suspended=s["state"] == "suspended")
                for s in snap["sessions"].values()]
    assert snap["refcounts"] == recompute_refcounts(sessions)
    evicted = {h for body in fake.calls("evict") for h in body["chunk_hashes"]}
    held = {h for s in sessions for h in s.chunk_hashes}
    assert evicted, "the node released sessions but sent no eviction"
    assert "sys" not in evicted
    assert not evicted & held, sorted(evicted & held)


async def test_sessions_move_back_and_forth_under_load_and_survive_kill9(
    daemon_proc_factory: Callable[..., DaemonProcess], postgres_server: PostgresServer,
    fakes: tuple[FakeLMCacheServer, FakeLMCacheServer],
) -> None:
    url = postgres_server.create_database()
    a, b = (
        daemon_proc_factory(noop=False, config={
            "session_store_url": url, "node_id": node, "lmcache_url": fake.url})
        for node, fake in zip(("a", "b"), fakes, strict=True)
    )
    nodes = (a, b)
    # No kept-alive connections: b's process is replaced mid-test.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        for d, own in ((a, "pa"), (b, "pb")):  # each node's own session holds "sys"
            await post(http, d, {"type": "turn_end", "session_id": own,
                                 "kv_transfer_params": {"chunk_hashes": ["sys", own]}})
        for r in range(1, ROUNDS + 1):
            # Every moving session's next turn on the other node, all at once.
            answers = await asyncio.gather(*(
                post(http, nodes[(r + i) % 2], {
                    "type": "turn_end", "session_id": sid,
                    "kv_transfer_params": {"chunk_hashes": moving_map(sid, r)}})
                for i, sid in enumerate(MOVING)
            ))
            assert all(x["ok"] for x in answers), answers
            if r == ROUNDS // 2:
                await wait_disjoint(http, a, b)
                b.kill()  # kill -9 mid-load; a keeps serving and takes b's sessions
                b.start()
        await wait_disjoint(http, a, b)
        for d, fake in zip(nodes, fakes, strict=True):
            await check_node(d, fake)
        # Every session is where its last turn went, with that turn's map.
        for i, sid in enumerate(MOVING):
            d = nodes[(ROUNDS + i) % 2]
            got = await post(http, d, {"type": "session_map", "session_id": sid})
            assert got["data"]["chunk_hashes"] == moving_map(sid, ROUNDS)
        assert (await owned(http, a)) | (await owned(http, b)) == {*MOVING, "pa", "pb"}
