"""A shared store's takeovers and releases go through the bus: an event's claim is adopted by
an AdoptSession command (committed through the unit of work), and the release check an event
asks for first is a CheckOwners whose releases are ReleaseSession commands, each sent
through ``bus.handle`` (no handler calls another directly). Two in-process daemons on one
PostgreSQL database; node a's notices checker is stopped so only the commands under test
release."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from support.pg_nodes import HANG_GUARD_S, in_process_nodes, sql
from support.postgres import PostgresServer

from ramakv_daemon.bootstrap import Daemon
from ramakv_daemon.bus.commands import AdoptSession, CheckOwners, Command, ReleaseSession
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.ownership.ownership import Ownership
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork
from ramakv_daemon.ports import StoreError, StoreFenced


@pytest.fixture
async def nodes(postgres_server: PostgresServer) -> AsyncIterator[tuple[Daemon, ...]]:
    # Node a hears b's takeovers but acts on none by itself: the test sends the commands.
    async with in_process_nodes(postgres_server.create_database(), quiet_a=True) as services:
        yield services


def record(svc: Daemon, *types: type[Command[Any]]) -> list[str]:
    """The commands of ``types`` the bus handles from now on, by name, in order."""
    handled: list[str] = []
    for type_ in types:
        real = svc.bus.handlers[type_]

        async def counted(command: Any, uow: UnitOfWork, real: Any = real) -> Any:
            handled.append(type(command).__name__)
            return await real(command, uow)

        svc.bus.handlers[type_] = counted
    return handled


async def turn_end(svc: Daemon, hashes: list[str]) -> tuple[int, dict[str, Any]]:
    event = {"type": "turn_end", "session_id": "s", "kv_transfer_params": {"chunk_hashes": hashes}}
    return await asyncio.wait_for(svc.handle(event), HANG_GUARD_S)


def refcounts_match(svc: Daemon) -> None:
    manager = svc.default.manager
    assert dict(manager.refcounts.counts) == recompute_refcounts(manager.sessions.values())


def test_ownership_commits_nothing_itself() -> None:
    """An adopt is the bus's command: ownership holds no unit of work to commit through."""
    assert "uow" not in Ownership.__init__.__code__.co_varnames


async def test_a_takeover_is_an_adopt_command_through_the_bus(
    nodes: tuple[Daemon, Daemon],
) -> None:
    a, b = nodes
    assert (await turn_end(a, ["h1", "h2"]))[0] == 200
    handled = record(b, AdoptSession)
    status, body = await turn_end(b, ["h1", "h3"])
    assert status == 200 and body["ok"], body
    assert handled == ["AdoptSession"] and b.ownership.takeovers == 1
    assert b.default.manager.sessions["s"].turn_count == 2
    refcounts_match(b)


async def test_a_stale_copys_release_and_claim_back_are_each_sent_through_the_bus(
    nodes: tuple[Daemon, Daemon],
) -> None:
    a, b = nodes
    assert (await turn_end(a, ["h1"]))[0] == 200
    assert (await turn_end(b, ["h1", "h3"]))[0] == 200  # a's copy is stale, unheard
    handled = record(a, CheckOwners, ReleaseSession, AdoptSession)
    status, body = await turn_end(a, ["h1", "h3", "h4"])
    assert status == 200 and body["ok"], body
    assert handled == ["CheckOwners", "ReleaseSession", "AdoptSession"]
    rows = await sql(a.config.session_store_url, "SELECT owner, turn_count FROM sessions")
    assert [tuple(r) for r in rows] == [("a", 3)]
    refcounts_match(a)


async def test_an_adopt_that_fails_answers_the_event_with_its_error(
    nodes: tuple[Daemon, Daemon],
) -> None:
    a, b = nodes
    assert (await turn_end(a, ["h1"]))[0] == 200

    async def failing(command: AdoptSession, uow: UnitOfWork) -> bool:
        raise StoreError("the store went away")

    b.bus.handlers[AdoptSession] = failing
    status, body = await turn_end(b, ["h1", "h3"])
    assert (status, body) == (
        503,
        {"ok": False, "type": "turn_end", "error": "the store went away"},
    )
    assert "s" not in b.default.manager.sessions and b.ownership.takeovers == 0


async def test_a_fenced_adopt_is_claimed_and_adopted_again(nodes: tuple[Daemon, Daemon]) -> None:
    a, b = nodes
    assert (await turn_end(a, ["h1"]))[0] == 200
    real = b.bus.handlers[AdoptSession]
    tries: list[int] = []

    async def fenced_once(command: AdoptSession, uow: UnitOfWork) -> bool:
        tries.append(1)
        if len(tries) == 1:
            raise StoreFenced(["s"])
        return bool(await real(command, uow))

    b.bus.handlers[AdoptSession] = fenced_once
    status, body = await turn_end(b, ["h1", "h3"])
    assert status == 200 and body["ok"], body
    # The second claim finds the row b's own (the first claimed it): taken back, not over.
    assert len(tries) == 2 and b.default.manager.sessions["s"].turn_count == 2
    refcounts_match(b)
