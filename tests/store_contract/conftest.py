"""Store contract fixtures: one fresh SessionStore per test, for every adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.store_adapters import ADAPTERS, StoreHome, make_home

from ramakv_daemon.ports import SessionStore


@pytest.fixture(params=ADAPTERS)
async def home(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreHome]:
    """Where one test's store lives: a fresh SQLite file or a fresh PostgreSQL database.
    Every store it made is closed at teardown."""
    h = await make_home(request.param, request, tmp_path)
    try:
        yield h
    finally:
        await h.close_all()


@pytest.fixture
async def store(home: StoreHome) -> SessionStore:
    """An opened store on a fresh, empty home."""
    return await home.opened()
