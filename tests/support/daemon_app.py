"""The in-process daemon family: ``make_config``, ``start_daemon``, ``daemon`` and ``rec_daemon``
(the app on aiohttp's test server, one :class:`DaemonClient` each) and a recording backend.
Registered for every suite by tests/conftest.py; see tests/README.md."""

from __future__ import annotations

import copy
import json
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from ramakv_daemon.bootstrap import Daemon
from ramakv_daemon.config import Config
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.http.app import init_app
from ramakv_daemon.http.keys import DAEMON_KEY
from ramakv_daemon.ports import (
    Backend,
    BackendResult,
    ChunkLocations,
    EvictMode,
    OrderPosition,
)
from support.trace_wire import parse_metrics


class RecordingBackend(Backend):
    """A noop backend that records every call: ("prefetch"|"delete"|"demote"|"cold",
    hashes). ``orders``: it takes order hints (ascend_ext's /memory/order: COLD is recorded
    as "cold"); off (the default), a stock memory API: 404, and delivery sends nothing."""

    name = "recording"

    def __init__(self, orders: bool = False) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.orders = orders

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        self.calls.append(("prefetch", list(chunk_hashes)))
        return BackendResult(ok=True, status=200)

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        self.calls.append((mode.value, list(chunk_hashes)))
        return BackendResult(ok=True, status=200)

    async def order(self, chunk_hashes: Sequence[str], position: OrderPosition) -> BackendResult:
        if not self.orders:
            return await super().order(chunk_hashes, position)
        self.calls.append((position, list(chunk_hashes)))
        return BackendResult(ok=True, status=200)

    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        return BackendResult(ok=True, status=200), ChunkLocations()

    async def close(self) -> None:
        return None

    def of(self, kind: str) -> list[str]:
        """Every hash sent in calls of ``kind``, in order."""
        return [h for k, hashes in self.calls if k == kind for h in hashes]


class DaemonClient:
    """An in-process daemon behind aiohttp's TestClient, with event, trace and metrics helpers."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def daemon(self) -> Daemon:
        """The daemon's parts, as the composition root built them."""
        return self.client.server.app[DAEMON_KEY]

    @property
    def config(self) -> Config:
        return self.daemon.config

    async def post(self, body: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
        """POST ``body`` (JSON-encoded unless bytes/str); returns (status, decoded answer)."""
        data = body if isinstance(body, bytes | str) else json.dumps(body)
        resp = await self.client.post("/event", data=data, **kwargs)
        return resp.status, json.loads(await resp.text())

    async def ok(self, type_: str, **fields: Any) -> dict[str, Any]:
        """Send an event that must succeed; check the envelope; return ``data``."""
        status, body = await self.post({"type": type_, **fields})
        assert status == 200, body
        assert set(body) == {"ok", "type", "data"}, body
        assert body["ok"] is True and body["type"] == type_, body
        return body["data"]

    async def err(self, type_: str | None, *, status: int = 200, **fields: Any) -> str:
        """Send an event that must fail; check the envelope; return ``error``."""
        payload = {"type": type_, **fields} if type_ is not None else dict(fields)
        got_status, body = await self.post(payload)
        assert got_status == status, body
        assert body["ok"] is False, body
        assert "data" not in body, body
        assert isinstance(body["error"], str) and body["error"], body
        return body["error"]

    async def turn_end(self, sid: str, hashes: list[str] | None, **extra: Any) -> dict[str, Any]:
        """A successful turn_end with ``hashes`` as kv_transfer_params.chunk_hashes."""
        return await self.ok(
            "turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes}, **extra
        )

    async def settle(self) -> None:
        """Wait for background backend calls."""
        await self.daemon.default.dispatcher.drain()

    def refcounts(self) -> dict[str, int]:
        return self.daemon.default.manager.refcounts.as_dict()

    def state(self) -> dict[str, Any]:
        """Everything an event may change: memory (sessions, refcounts, demoted) and disk."""
        m = self.daemon.default.manager
        return {
            "sessions": {sid: s.to_dict() for sid, s in m.sessions.items()},
            "refcounts": m.refcounts.as_dict(),
            # The manager's bookkeeping of suspended sessions' chunks, whatever it is called.
            "parked": {
                name: copy.copy(getattr(m, name))
                for name in ("parked", "demoted")
                if hasattr(m, name)
            },
            "db": db_rows(self.config.session_store_path),
        }

    def assert_consistent(self) -> None:
        """The invariant: refcounts equal those recomputed from every live map + hold."""
        m = self.daemon.default.manager
        assert m.refcounts.as_dict() == recompute_refcounts(m.sessions.values(), m.forks.values())

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return str(self.client.make_url("")).rstrip("/")

    async def ws(self, query: str = "") -> aiohttp.ClientWebSocketResponse:
        """Open ``/trace`` in protocol 2 (``query`` like ``"?since=3"``)."""
        query = "?protocol=2" + ("&" + query.lstrip("?") if query else "")
        return await self.client.ws_connect(f"/trace{query}")

    async def metrics_text(self) -> str:
        """GET /metrics as text."""
        resp = await self.client.get("/metrics")
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return await resp.text()

    async def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """GET /metrics parsed: (sample name, sorted labels) -> value."""
        return parse_metrics(await self.metrics_text())

    async def sessions_view(self) -> dict[str, dict[str, Any]]:
        """list_sessions rows keyed by id."""
        data = await self.ok("list_sessions", limit=10000)
        return {row["session_id"]: row for row in data["sessions"]}

    async def close(self) -> None:
        await self.client.close()


def db_rows(path: str) -> dict[str, Any]:
    """The stored sessions (original table) and our state table, read with plain sqlite3."""
    if not Path(path).exists():
        return {}
    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        out: dict[str, Any] = {
            "sessions": sorted(con.execute("SELECT * FROM sessions"))
            if "sessions" in tables
            else []
        }
        if "session_state" in tables:
            out["session_state"] = sorted(
                con.execute("SELECT session_id, suspended, fork_holds_json FROM session_state")
            )
        return out
    finally:
        con.close()


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
    """Start an in-process daemon: ``await start_daemon(config=None, *, store=None,
    backend=None, clock=None, **config_overrides)``.

    Without a config, ``make_config(**config_overrides)`` is used (overrides with a config is a
    TypeError); several may run on the same file in turn (close the first with
    ``await d.close()``, which stops the service and the store).
    """

    async def start(
        config: Config | None = None,
        *,
        store: Any = None,
        backend: Any = None,
        clock: Callable[[], float] | None = None,
        **overrides: Any,
    ) -> DaemonClient:
        if config is not None and overrides:
            raise TypeError(f"start_daemon: pass a config or overrides, not both: {overrides}")
        extra = {"clock": clock} if clock is not None else {}
        app = init_app(config or make_config(**overrides), store=store, backend=backend, **extra)
        return DaemonClient(await aiohttp_client(app))

    return start


@pytest.fixture
async def daemon(start_daemon: StartDaemon) -> DaemonClient:
    """A started in-process daemon with the default test config."""
    return await start_daemon()


@pytest.fixture
async def rec_daemon(start_daemon: StartDaemon) -> tuple[DaemonClient, RecordingBackend]:
    """An in-process daemon whose backend records prefetch/evict/order calls (it takes
    order hints, as ascend_ext's memory API does)."""
    backend = RecordingBackend(orders=True)
    return await start_daemon(backend=backend), backend
