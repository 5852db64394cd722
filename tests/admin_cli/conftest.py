"""Admin CLI tests: tests/ on sys.path (support.*, fakes.*); two stand-in LMCache servers."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

from fakes.lmcache_server import FakeLMCacheServer  # noqa: E402


@pytest.fixture
async def two_fakes() -> AsyncIterator[tuple[FakeLMCacheServer, FakeLMCacheServer]]:
    """Two stand-in memory APIs, one per deployment."""
    async with FakeLMCacheServer() as a, FakeLMCacheServer() as b:
        yield a, b
