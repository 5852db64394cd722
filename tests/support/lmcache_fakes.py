"""Fixtures serving the stand-in LMCache memory API (support.lmcache_server) in the test's own
event loop; tests/conftest.py registers them for every suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from support.lmcache_server import FakeLMCacheServer


@pytest.fixture
async def fake_lmcache() -> AsyncIterator[FakeLMCacheServer]:
    """A fake LMCache memory API on a free loopback port (same event loop as the test)."""
    async with FakeLMCacheServer() as fake:
        yield fake


@pytest.fixture
async def two_fakes() -> AsyncIterator[tuple[FakeLMCacheServer, FakeLMCacheServer]]:
    """Two stand-in memory APIs, one per deployment."""
    async with FakeLMCacheServer() as a, FakeLMCacheServer() as b:
        yield a, b
