"""Fixtures serving tests/fakes' stand-in LMCache memory API in the test's own event loop.

Import them into a suite's conftest.py (tests/ on sys.path, as for every ``support.*``)::

    from support.lmcache_fakes import fake_lmcache, two_fakes  # noqa: F401
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fakes.lmcache_server import FakeLMCacheServer


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
