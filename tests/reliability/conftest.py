"""Reliability suite fixtures: in-process daemons, real daemon processes, fake LMCache server."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

# site-packages holds an unrelated top-level `tests` package: import helpers as `support.*`.
TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

from fakes.lmcache_server import FakeLMCacheServer  # noqa: E402
from support.daemon_app import DaemonClient  # noqa: E402
from support.daemon_proc import daemon_proc, daemon_proc_factory  # noqa: E402,F401

from ramakv_daemon.config import Config  # noqa: E402
from ramakv_daemon.http.app import init_app  # noqa: E402


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    """A Config on a tmp SQLite file, noop backend; kwargs override."""

    def make(**overrides: Any) -> Config:
        base: dict[str, Any] = {
            "session_store_path": str(tmp_path / "sessions.db"),
            "noop_backend": True,
            "debug_dir": str(tmp_path / "kvcache_debug"),
        }
        base.update(overrides)
        return Config(**base)

    return make


StartDaemon = Callable[..., Awaitable[DaemonClient]]


@pytest.fixture
def start_daemon(aiohttp_client: Any, make_config: Callable[..., Config]) -> StartDaemon:
    """``await start_daemon(config=None, store=None, backend=None)``: an in-process daemon."""

    async def start(
        config: Config | None = None, store: Any = None, backend: Any = None
    ) -> DaemonClient:
        app = init_app(config or make_config(), store=store, backend=backend)
        return DaemonClient(await aiohttp_client(app))

    return start


@pytest.fixture
async def fake_lmcache() -> AsyncIterator[FakeLMCacheServer]:
    """A fake LMCache memory API on a free loopback port (same event loop as the test)."""
    async with FakeLMCacheServer() as fake:
        yield fake
