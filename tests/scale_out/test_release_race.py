"""The race between a release and a takeover of the same session on one node, made to
happen: node a's release of a session is still committing when an event for that session
reaches a again. The event must wait for the release's commit before claiming the session
back, or that commit would delete the row a just claimed. Two in-process daemons (the
daemons built by bootstrap, real PostgreSQL stores) so the test can hold the release's commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from support.pg_nodes import HANG_GUARD_S, in_process_nodes, sql, until
from support.postgres import PostgresServer

from ramakv_daemon.bootstrap import Daemon
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.ports import WriteBatch


@pytest.fixture
async def nodes(postgres_server: PostgresServer) -> AsyncIterator[tuple[Daemon, ...]]:
    async with in_process_nodes(postgres_server.create_database(), quiet_a=False) as services:
        yield services


async def ok(svc: Daemon, **event: Any) -> dict[str, Any]:
    status, body = await svc.handle(event)
    assert status == 200 and body["ok"], body
    return dict(body["data"])


def condition(check: Callable[[], bool]) -> Callable[[], Any]:
    async def holds() -> bool:
        return check()

    return holds


async def test_a_takeover_waits_for_the_release_still_committing(
    nodes: tuple[Daemon, Daemon],
) -> None:
    a, b = nodes
    url = a.config.session_store_url
    await ok(a, type="turn_end", session_id="x", kv_transfer_params={"chunk_hashes": ["h1"]})
    # Hold node a's commit of its release of x (the write that closes x) until told.
    entered, gate = asyncio.Event(), asyncio.Event()
    real_write = a.store.write

    async def held_write(batch: WriteBatch) -> None:
        if "x" in batch.sessions and batch.sessions["x"] is None:
            entered.set()
            await gate.wait()
        await real_write(batch)

    a.store.write = held_write  # type: ignore[method-assign]

    await ok(b, type="turn_start", session_id="x")  # b takes x; a starts releasing it
    await asyncio.wait_for(entered.wait(), HANG_GUARD_S)
    assert "x" not in a.default.manager.sessions  # released in a's memory, its commit held
    # x comes back to a while that commit is held.
    back = asyncio.create_task(a.handle({"type": "turn_start", "session_id": "x"}))

    async def waiting_or_claimed() -> bool:  # the fixed code waits; a broken one claims
        owner = await sql(url, "SELECT owner FROM sessions WHERE session_id = 'x'")
        return a.ownership.release_waits == 1 or [r[0] for r in owner] == ["a"]

    await until(waiting_or_claimed, "node a's event to wait for the release or claim x")
    gate.set()
    status, body = await asyncio.wait_for(back, HANG_GUARD_S)
    assert status == 200 and body["ok"] and body["data"]["prefetch_count"] == 1, body

    # x is a's again, in memory and in the database (the release's delete touched nothing).
    assert [tuple(r) for r in await sql(url, "SELECT session_id, owner FROM sessions")] == [
        ("x", "a")
    ]
    await until(condition(lambda: "x" not in b.default.manager.sessions), "node b to release x")
    for svc in (a, b):
        assert dict(svc.default.manager.refcounts.counts) == recompute_refcounts(
            svc.default.manager.sessions.values()
        )
    assert dict(a.default.manager.refcounts.counts) == {"h1": 1}
    assert a.ownership.release_waits == 1
