"""A shared store's releases are commands through the bus: CheckOwners asks the database,
each session lost is a ReleaseSession whose check ("not touched since") and close apply in
one loop step, and a stale copy an event reaches is released first (ReleaseFirst) before
the event applies on the stored row; a sweep's lone events are BackgroundEvent commands.
Two in-process daemons on one PostgreSQL database; node a's notices checker is stopped so
only the commands under test release."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.pg_nodes import HANG_GUARD_S, in_process_nodes, sql
from support.postgres import PostgresServer

from ramakv_daemon.bootstrap import Daemon
from ramakv_daemon.bus.commands import BackgroundEvent, CheckOwners, ReleaseSession
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.ownership.ownership import Ownership
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork


@pytest.fixture
async def nodes(postgres_server: PostgresServer) -> AsyncIterator[tuple[Daemon, ...]]:
    # Node a hears b's takeovers but acts on none by itself: the test sends the commands.
    async with in_process_nodes(postgres_server.create_database(), quiet_a=True) as services:
        yield services


async def ok(svc: Daemon, **event: Any) -> dict[str, Any]:
    status, body = await asyncio.wait_for(svc.handle(event), HANG_GUARD_S)
    assert status == 200 and body["ok"], body
    return dict(body["data"])


async def turn_end(svc: Daemon, hashes: list[str]) -> dict[str, Any]:
    return await ok(
        svc, type="turn_end", session_id="s", kv_transfer_params={"chunk_hashes": hashes}
    )


def refcounts_match(svc: Daemon) -> None:
    manager = svc.default.manager
    assert dict(manager.refcounts.counts) == recompute_refcounts(manager.sessions.values())


def test_ownership_holds_no_callable_into_the_pipeline() -> None:
    """Nothing is bound after construction: routing has no serve() nor handle."""
    assert not hasattr(Ownership, "serve")
    assert "handle" not in Ownership.__init__.__code__.co_names


async def test_a_release_touched_since_is_refused_then_checked_again(
    nodes: tuple[Daemon, Daemon],
) -> None:
    a, b = nodes
    await turn_end(a, ["h1"])
    seen = a.default.manager.sessions["s"]
    await turn_end(a, ["h1", "h2"])  # an event since: a new object
    await turn_end(b, ["h1", "h3"])  # b takes s over; a has heard nothing acted on
    assert "s" in a.default.manager.sessions
    assert not await a.bus.handle(ReleaseSession("s", seen, "b"))
    assert "s" in a.default.manager.sessions and a.ownership.releases == 0
    assert await a.bus.handle(CheckOwners(frozenset({"s"}))) == 1
    assert "s" not in a.default.manager.sessions and a.ownership.releases == 1
    refcounts_match(a)


async def test_the_check_and_the_close_apply_in_one_loop_step(
    nodes: tuple[Daemon, Daemon],
) -> None:
    a, b = nodes
    await turn_end(a, ["h1"])
    await turn_end(b, ["h1", "h3"])
    seen = a.default.manager.sessions["s"]
    release = asyncio.create_task(a.bus.handle(ReleaseSession("s", seen, "b")))
    await asyncio.sleep(0)  # the release task's first step, no more
    # Checked and closed in that step: no event could have come in between.
    assert "s" not in a.default.manager.sessions
    assert await asyncio.wait_for(release, HANG_GUARD_S)
    refcounts_match(a)


async def test_an_event_on_a_stale_copy_releases_it_first_and_applies_on_the_stored_row(
    nodes: tuple[Daemon, Daemon],
) -> None:
    a, b = nodes
    url = a.config.session_store_url
    await turn_end(a, ["h1"])
    await turn_end(b, ["h1", "h3"])  # b's turn 2; a's copy (turn 1) is stale, unheard
    assert "s" in a.default.manager.sessions
    # a's write of its stale copy is fenced; the copy is released first, the row claimed
    # back and the event applied on what b acknowledged.
    await turn_end(a, ["h1", "h3", "h4"])
    rows = await sql(url, "SELECT owner, turn_count FROM sessions WHERE session_id = 's'")
    assert [tuple(r) for r in rows] == [("a", 3)]
    assert a.ownership.releases == 1 and a.ownership.takeovers == 1
    assert a.default.manager.sessions["s"].turn_count == 3
    refcounts_match(a)


async def test_a_sweeps_lone_event_is_a_background_command(nodes: tuple[Daemon, Daemon]) -> None:
    """What the idle sweep sends on a shared store (Daemon.background_run is the same run):
    one BackgroundEvent through the bus, admitted to the background lane."""
    a, _ = nodes
    await turn_end(a, ["h1"])
    handled: list[object] = []
    real = a.bus.handlers[BackgroundEvent]

    async def counted(command: BackgroundEvent, uow: UnitOfWork) -> Any:
        handled.append(command.payload["type"])
        return await real(command, uow)

    a.bus.handlers[BackgroundEvent] = counted
    admitted = a.lanes.background_admitted
    event = {"type": "session_suspend", "session_id": "s"}
    status, body = await a.idle_sweep.run(event, None)
    assert status == 200 and body["ok"] and body["data"]["suspended"], body
    assert handled == ["session_suspend"] and a.lanes.background_admitted == admitted + 1
