"""Sessions moved back and forth between two real daemons under load, each steering its
own (stand-in) LMCache; then kill -9 of one mid-load. Every eviction is checked as the
stand-in carries it out, against the sending node's refcounts of that moment."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest
from support.daemon_proc import DaemonProcess, trace_snapshot
from support.lmcache_server import FakeLMCacheServer
from support.postgres import PostgresServer

from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.core.session import Session

MOVING = [f"m{i}" for i in range(6)]
ROUNDS = 16


class EvictionProbe:
    """Called by a stand-in LMCache as it carries out each delete (``on_delete``): asks the
    node that sent it, right then, which of its sessions reference each chunk.

    The ask runs beside the delete (the fake answers the daemon at once, never waiting on
    it, so a daemon re-sending its outbox while starting is never blocked); a chunk of this
    load never comes back to a node once its refcount there fell to 0, so a holder seen by
    the ask was a holder when the eviction was sent.
    """

    def __init__(self, node: DaemonProcess) -> None:
        self.node = node
        self.checks: list[asyncio.Task[dict[str, list[str]]]] = []

    def __call__(self, hashes: list[str]) -> None:
        self.checks.append(asyncio.get_running_loop().create_task(self._holders(hashes)))

    async def _holders(self, hashes: list[str]) -> dict[str, list[str]]:
        """chunk -> the node's sessions holding it, as the node answers now (asked again
        while it is restarting: refused connections are retried, 120 s hang guard)."""
        body = {"type": "chunk_info", "chunk_hashes": hashes}
        deadline = time.monotonic() + 120
        async with aiohttp.ClientSession() as http:
            while True:
                try:
                    async with http.post(self.node.url + "/event", json=body) as r:
                        data = (await r.json())["data"]
                    break
                except (aiohttp.ClientError, OSError):
                    assert time.monotonic() < deadline, "the node never answered chunk_info"
                    await asyncio.sleep(0.05)
        return {h: c["holders"] for h, c in data["chunks"].items() if c["refcount"]}

    async def held_when_sent(self) -> dict[str, list[str]]:
        """Every evicted chunk a session of the node still held when the delete ran."""
        held: dict[str, list[str]] = {}
        for found in await asyncio.gather(*self.checks):
            held.update(found)
        return held


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeLMCacheServer, FakeLMCacheServer]]:
    async with FakeLMCacheServer() as fa, FakeLMCacheServer() as fb:
        yield fa, fb


async def post(http: aiohttp.ClientSession, d: DaemonProcess, body: dict) -> dict:
    async with http.post(d.url + "/event", json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


# Hex, as LMCache's chunk hashes are (the stand-in refuses anything else, as the real
# memory API does): the chunk every node shares, each node's own, each moving turn's.
SYS = "5959"
OWN = {"pa": "a0a0", "pb": "b0b0"}


def moving_map(sid: str, r: int) -> list[str]:
    """A moving session's map at round ``r``: the shared chunk and two of this round's own.

    No chunk but SYS is in two rounds' maps, so a node holds a chunk for one stretch only
    (its round's turn there, or the next round's takeover adopting that map) and never
    again once its refcount there fell to 0: what the eviction probe relies on.
    """
    tag = MOVING.index(sid) + 1
    return [SYS, f"{tag:x}{r:04x}0", f"{tag:x}{r:04x}1"]


async def owned(http: aiohttp.ClientSession, d: DaemonProcess) -> set[str]:
    data = (await post(http, d, {"type": "list_sessions", "limit": 1000}))["data"]
    return {r["session_id"] for r in data["sessions"]}


async def wait_disjoint(http: aiohttp.ClientSession, a: DaemonProcess, b: DaemonProcess) -> None:
    """Until no session is held by both nodes (every takeover was released)."""
    deadline = time.monotonic() + 60
    while (await owned(http, a)) & (await owned(http, b)):
        assert time.monotonic() < deadline, "a taken session was never released"
        await asyncio.sleep(0.02)


async def check_node(d: DaemonProcess, fake: FakeLMCacheServer) -> None:
    """Refcounts equal those recomputed from what the node owns; no eviction it sent is for
    a chunk a session it owns now references, nor for the chunk every node shares."""
    snap = await trace_snapshot(d.url)
    sessions = [
        Session(s["session_id"], tuple(s["chunk_hashes"]), suspended=s["state"] == "suspended")
        for s in snap["sessions"].values()
    ]
    assert snap["refcounts"] == recompute_refcounts(sessions)
    evicted = {h for body in fake.calls("evict") for h in body["chunk_hashes"]}
    held = {h for s in sessions for h in s.chunk_hashes}
    assert evicted, "the node released sessions but sent no eviction"
    assert SYS not in evicted
    assert not evicted & held, sorted(evicted & held)


async def test_sessions_move_back_and_forth_under_load_and_survive_kill9(
    daemon_proc_factory: Callable[..., DaemonProcess],
    postgres_server: PostgresServer,
    fakes: tuple[FakeLMCacheServer, FakeLMCacheServer],
) -> None:
    url = postgres_server.create_database()
    a, b = (
        daemon_proc_factory(
            noop=False, config={"session_store_url": url, "node_id": node, "lmcache_url": fake.url}
        )
        for node, fake in zip(("a", "b"), fakes, strict=True)
    )
    nodes = (a, b)
    probes = [EvictionProbe(d) for d in nodes]
    for fake, probe in zip(fakes, probes, strict=True):
        fake.on_delete = probe
    # No kept-alive connections: b's process is replaced mid-test.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        for d, own in ((a, "pa"), (b, "pb")):  # each node's own session holds SYS
            await post(
                http,
                d,
                {
                    "type": "turn_end",
                    "session_id": own,
                    "kv_transfer_params": {"chunk_hashes": [SYS, OWN[own]]},
                },
            )
        for r in range(1, ROUNDS + 1):
            # Every moving session's next turn on the other node, all at once.
            answers = await asyncio.gather(
                *(
                    post(
                        http,
                        nodes[(r + i) % 2],
                        {
                            "type": "turn_end",
                            "session_id": sid,
                            "kv_transfer_params": {"chunk_hashes": moving_map(sid, r)},
                        },
                    )
                    for i, sid in enumerate(MOVING)
                )
            )
            assert all(x["ok"] for x in answers), answers
            if r == ROUNDS // 2:
                await wait_disjoint(http, a, b)
                b.kill()  # kill -9 mid-load; a keeps serving and takes b's sessions
                b.start()
        await wait_disjoint(http, a, b)
        for d, fake in zip(nodes, fakes, strict=True):
            await check_node(d, fake)
        for probe in probes:
            assert probe.checks, "no eviction was carried out"
            assert await probe.held_when_sent() == {}
        # Every session is where its last turn went, with that turn's map.
        for i, sid in enumerate(MOVING):
            d = nodes[(ROUNDS + i) % 2]
            got = await post(http, d, {"type": "session_map", "session_id": sid})
            assert got["data"]["chunk_hashes"] == moving_map(sid, ROUNDS)
        assert (await owned(http, a)) | (await owned(http, b)) == {*MOVING, "pa", "pb"}
