"""Owed releases are settled by a SettleOwed command through the bus: a full CheckOwners
sends it after its releases, start-up sends it once the sessions are loaded, and nothing
else settles (a SettleOwed handler that does nothing leaves the rows). Two in-process
daemons on one PostgreSQL database; node a's notices checker is stopped so only the
commands under test release."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from support.bus_record import record_commands
from support.pg_nodes import HANG_GUARD_S, in_process_nodes, sql
from support.postgres import PostgresServer

from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.adapters.postgres.store import PostgresSessionStore
from ramakv_daemon.bootstrap import Daemon, build
from ramakv_daemon.bus.commands import CheckOwners, ReleaseSession, SettleOwed
from ramakv_daemon.config import Config
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork

OWE = (
    "INSERT INTO owed_releases (node_id, namespace, session_id, hashes_json) "
    "VALUES ($1, $2, $3, $4)"
)


@pytest.fixture
async def nodes(postgres_server: PostgresServer) -> AsyncIterator[tuple[Daemon, ...]]:
    # Node a hears b's takeovers but acts on none by itself: the test sends the commands.
    async with in_process_nodes(postgres_server.create_database(), quiet_a=True) as services:
        yield services


async def turn_end(svc: Daemon, hashes: list[str]) -> None:
    event = {"type": "turn_end", "session_id": "s", "kv_transfer_params": {"chunk_hashes": hashes}}
    status, body = await asyncio.wait_for(svc.handle(event), HANG_GUARD_S)
    assert status == 200 and body["ok"], body


async def owed_of(url: str, node: str) -> list[str]:
    rows = await sql(url, "SELECT session_id FROM owed_releases WHERE node_id = $1", node)
    return sorted(r[0] for r in rows)


async def test_a_full_check_settles_through_the_bus_after_its_releases(
    nodes: tuple[Daemon, Daemon],
) -> None:
    a, b = nodes
    url = a.config.session_store_url
    await turn_end(a, ["h1", "h2"])
    await turn_end(b, ["h1", "h3"])  # b takes s over: a owes its map (a row of a's)
    # A session lost while a held it not (closed or taken while a was down).
    await sql(url, OWE, "a", a.namespaces.default, "gone", '["h9", "h1"]')
    assert await owed_of(url, "a") == ["gone", "s"]
    handled = record_commands(a, CheckOwners, ReleaseSession, SettleOwed)
    assert await asyncio.wait_for(a.bus.handle(CheckOwners()), HANG_GUARD_S) == 1
    # s released from memory (its row dropped with it), then gone's row settled: h9 and
    # h1 evicted (after s's release nothing here references either).
    assert handled == [("CheckOwners", 1), ("ReleaseSession", True), ("SettleOwed", 2)]
    assert await owed_of(url, "a") == []


async def test_nothing_but_the_command_settles(nodes: tuple[Daemon, Daemon]) -> None:
    a, _ = nodes
    url = a.config.session_store_url
    await sql(url, OWE, "a", a.namespaces.default, "gone", '["h9"]')
    sent: list[SettleOwed] = []

    async def settles_nothing(command: SettleOwed, uow: UnitOfWork) -> int:
        sent.append(command)
        return 0

    a.bus.handlers[SettleOwed] = settles_nothing
    assert await asyncio.wait_for(a.bus.handle(CheckOwners()), HANG_GUARD_S) == 0
    assert sent == [SettleOwed(frozenset())] and await owed_of(url, "a") == ["gone"]
    # A check of named sessions settles nothing (only a full check does).
    await a.bus.handle(CheckOwners(frozenset({"gone"})))
    assert len(sent) == 1


async def test_start_up_settles_through_the_bus(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    c = build(
        Config(session_store_url=url, node_id="c", ownership_check_s=3600.0),
        PostgresSessionStore(url, "c"),
        NoopBackend(),
    )
    handled = record_commands(c, SettleOwed)
    schema = PostgresSessionStore(url, "x")  # the tables, so c's row is there as it starts
    await schema.open()
    await schema.close()
    await sql(url, OWE, "c", c.namespaces.default, "gone", '["h9"]')
    await c.start()
    try:
        assert handled == [("SettleOwed", 1)]
        assert await owed_of(url, "c") == []
    finally:
        await c.stop()
