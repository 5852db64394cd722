"""Fixtures for proxy and hook tests: the stand-in engine and an in-process ramakv-proxy
(import ``engine`` and ``start_proxy`` into a conftest or test module)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from ramakv_proxy import LIFECYCLE, SENDER, Lifecycle, ProxySettings, make_app
from ramakv_sdk.lifecycle.clock import Clock
from ramakv_sdk.sender import EventSender
from support.openai_engine import CHUNK_TOKENS, StandInEngine


class RunningProxy:
    """A proxy app served on a loopback port; ``sender`` is its event sender."""

    def __init__(self, runner: web.AppRunner, url: str) -> None:
        self.runner = runner
        self.url = url

    @property
    def sender(self) -> EventSender:
        return self.runner.app[SENDER]

    @property
    def lifecycle(self) -> Lifecycle:
        return self.runner.app[LIFECYCLE]

    def clients_gone(self) -> bool:
        """No client connection of the proxy is still open on its side: each one's
        connection_lost has run, so the proxy's next write to it fails (aiohttp drops a
        protocol's transport there)."""
        server = self.runner.server
        assert server is not None
        return all(handler.transport is None for handler in server.connections)


@pytest.fixture
async def engine() -> AsyncIterator[StandInEngine]:
    e = await StandInEngine().start()
    yield e
    await e.stop()


@pytest.fixture
async def start_proxy() -> AsyncIterator[Callable[..., Awaitable[RunningProxy]]]:
    runners: list[web.AppRunner] = []

    async def start(
        upstream: str,
        daemon_url: str,
        clock: Clock | None = None,
        **kw,  # noqa: ANN003
    ) -> RunningProxy:
        kw.setdefault("chunk_size", CHUNK_TOKENS)  # hash streamed turns as the stand-in does
        app = make_app(ProxySettings(upstream, daemon_url, **kw), clock=clock)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        runners.append(runner)
        return RunningProxy(runner, f"http://127.0.0.1:{port}")

    yield start
    for r in runners:
        await r.cleanup()
