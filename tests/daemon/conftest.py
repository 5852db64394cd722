"""Daemon tests: in-process app via aiohttp's test client, plus the real-process fixtures."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

# site-packages holds an unrelated top-level `tests` package, so shared helpers are
# imported as `support.*` with tests/ on sys.path (same convention as tests/fakes).
TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from support.daemon_app import DaemonClient, RecordingBackend  # noqa: E402
from support.daemon_proc import daemon_proc, daemon_proc_factory  # noqa: E402,F401

from ramakv_daemon.config import Config  # noqa: E402
from ramakv_daemon.http.app import init_app  # noqa: E402


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., Config]:
    """A Config on a tmp SQLite file, noop backend, debug_dir under tmp_path; kwargs override."""

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
    """Start an in-process daemon: ``await start_daemon(config=None, store=None, backend=None)``.

    Without a config, ``make_config()`` is used; several may run on the same file in turn
    (close the first with ``await d.close()``, which stops the service and the store).
    """

    async def start(
        config: Config | None = None, store: Any = None, backend: Any = None
    ) -> DaemonClient:
        app = init_app(config or make_config(), store=store, backend=backend)
        return DaemonClient(await aiohttp_client(app))

    return start


@pytest.fixture
async def daemon(start_daemon: StartDaemon) -> DaemonClient:
    """A started in-process daemon with the default test config."""
    return await start_daemon()


@pytest.fixture
async def rec_daemon(start_daemon: StartDaemon) -> tuple[DaemonClient, RecordingBackend]:
    """An in-process daemon whose backend records prefetch/evict calls."""
    backend = RecordingBackend()
    return await start_daemon(backend=backend), backend
