"""PostgreSQL store only: versioned migrations at start-up, a newer schema refused, fork ids
of two nodes on one database."""

from __future__ import annotations

import asyncpg
import pytest
from support.postgres import PostgresServer

from ramakv_daemon.adapters.postgres import schema as postgres_schema
from ramakv_daemon.adapters.postgres.store import PostgresSessionStore
from ramakv_daemon.core.session import Session
from ramakv_daemon.ports import AnswerRow, StoreError, WriteBatch


async def versions(url: str) -> list[int]:
    con = await asyncpg.connect(url)
    try:
        return [r[0] for r in await con.fetch("SELECT version FROM schema_version ORDER BY 1")]
    finally:
        await con.close()


async def test_a_fresh_database_gets_every_version(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    store = PostgresSessionStore(url, "n")
    await store.open()
    await store.close()
    assert await versions(url) == [v for v, _, _ in postgres_schema.MIGRATIONS]


async def test_an_older_database_is_migrated_and_keeps_its_rows(
    postgres_server: PostgresServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = postgres_server.create_database()
    monkeypatch.setattr(postgres_schema, "MIGRATIONS", postgres_schema.MIGRATIONS[:1])
    monkeypatch.setattr(postgres_schema, "LATEST_VERSION", 1)
    old = PostgresSessionStore(url, "n")
    await old.open()
    await old.close()
    # The row as a version-1 daemon wrote it (this daemon's statements need newer tables).
    con = await asyncpg.connect(url)
    try:
        await con.execute(
            "INSERT INTO sessions (session_id, map_json, turn_count, owner) "
            "VALUES ('s', '[\"a\"]', 1, 'n')"
        )
    finally:
        await con.close()
    monkeypatch.undo()
    new = PostgresSessionStore(url, "n")
    await new.open()
    try:
        assert await versions(url) == [v for v, _, _ in postgres_schema.MIGRATIONS]
        assert await new.load_all() == [Session("s", ("a",), 1)]
        await new.write(WriteBatch({}, event_ids=[AnswerRow("e", "{}", 1.0, "digest")]))
        assert await new.load_event_ids(5) == [("e", "{}", "digest")]
    finally:
        await new.close()


async def test_a_newer_schema_is_refused(postgres_server: PostgresServer) -> None:
    url = postgres_server.create_database()
    store = PostgresSessionStore(url, "n")
    await store.open()
    await store.close()
    con = await asyncpg.connect(url)
    await con.execute("INSERT INTO schema_version (version, description) VALUES (99, 'x')")
    await con.close()
    with pytest.raises(StoreError, match="newer than this daemon"):
        await PostgresSessionStore(url, "n").open()


async def test_an_unreachable_server_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot open session store"):
        await PostgresSessionStore(
            "postgresql://nobody@127.0.0.1:1/x", "n", connect_timeout_s=2
        ).open()


async def test_a_fork_id_another_node_holds_is_never_overwritten(
    postgres_server: PostgresServer,
) -> None:
    from ramakv_daemon.core.fork import Fork

    url = postgres_server.create_database()
    a, b = PostgresSessionStore(url, "a"), PostgresSessionStore(url, "b")
    await a.open()
    await b.open()
    try:
        mine = Fork(1, "p", ("x",), 1.0)
        await a.write(WriteBatch({}, forks={1: mine}, next_fork_id=2))
        with pytest.raises(StoreError, match="fork id 1 is held by another node"):
            await b.write(
                WriteBatch({"q": Session("q", ("y",))}, forks={1: Fork(1, "q", ("y",), 2.0)})
            )
        assert await a.load_forks() == ([mine], 2)
        assert await b.load_all() == []  # the failed commit wrote nothing
        assert b.problem() is None  # the database is fine
    finally:
        await a.close()
        await b.close()
