"""Fixtures for the proxy suite: the stand-in engine and an in-process proxy."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from support.openai_engine import CHUNK_TOKENS, StandInEngine

from ramakv_sdk.proxy import ProxySettings, make_app


class RunningProxy:
    """A proxy app served on a loopback port; ``sender`` is its event sender."""

    def __init__(self, runner: web.AppRunner, url: str) -> None:
        self.runner = runner
        self.url = url

    @property
    def sender(self):  # noqa: ANN201
        from ramakv_sdk.proxy import SENDER

        return self.runner.app[SENDER]


@pytest.fixture
async def engine() -> AsyncIterator[StandInEngine]:
    e = await StandInEngine().start()
    yield e
    await e.stop()


@pytest.fixture
async def start_proxy() -> AsyncIterator[Callable[..., Awaitable[RunningProxy]]]:
    runners: list[web.AppRunner] = []

    async def start(upstream: str, daemon_url: str, **kw) -> RunningProxy:  # noqa: ANN003
        kw.setdefault("chunk_size", CHUNK_TOKENS)  # hash streamed turns as the stand-in does
        runner = web.AppRunner(make_app(ProxySettings(upstream, daemon_url, **kw)), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        runners.append(runner)
        return RunningProxy(runner, f"http://127.0.0.1:{port}")

    yield start
    for r in runners:
        await r.cleanup()
