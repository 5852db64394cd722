"""Every SessionStore adapter, behind one 'home' a contract test can open stores in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.ports import SessionStore

ADAPTERS = ["sqlite", "postgresql"]


@dataclass
class StoreHome:
    """One fresh place a store keeps its data; ``make`` gives a new, unopened store on it
    (several stores on one home see each other's commits, as a restart would)."""

    adapter: str
    location: str
    factory: Callable[[], SessionStore]
    made: list[SessionStore] = field(default_factory=list)

    def make(self) -> SessionStore:
        store = self.factory()
        self.made.append(store)
        return store

    async def opened(self) -> SessionStore:
        store = self.make()
        await store.open()
        return store

    async def close_all(self) -> None:
        for store in self.made:
            await store.close()


async def make_home(adapter: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreHome:
    """A fresh home for ``adapter``."""
    if adapter == "sqlite":
        path = str(tmp_path / "sessions.db")
        return StoreHome(adapter, path, lambda: SqliteSessionStore(path))
    if adapter == "postgresql":
        from ramakv_daemon.adapters.postgres.store import PostgresSessionStore

        server = request.getfixturevalue("postgres_server")
        url = server.create_database()
        return StoreHome(adapter, url, lambda: PostgresSessionStore(url, node_id="node-a"))
    raise ValueError(f"unknown store adapter {adapter!r}")
