"""The proxy on the stock stack: a real daemon steering the stock-server stand-in through
lmcache_mp, the proxy in front of the stand-in engine. The turn's keys are the server's
(the engine's tokens, blake3 at the server's chunk size), the tool pause demotes them to
L2, and the next request's restore prefetches its own tokens back into L1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from support import tool_turns
from support.daemon_proc import DaemonProcess
from support.lmcache_mp_server import FakeLMCacheMPServer
from support.openai_engine import CHUNK_TOKENS, prompt_of, tokens_of
from support.tool_turns import ASK, after_tool, session_state

from ramakv_proxy.app import STOCK
from ramakv_proxy.stock_keys import chunk_hashes

MODEL = "m"


@pytest.fixture
async def server() -> AsyncIterator[FakeLMCacheMPServer]:
    async with FakeLMCacheMPServer(chunk_size=CHUNK_TOKENS) as fake:
        fake.register(MODEL)
        yield fake


@pytest.fixture
def steering(tmp_path, server):  # noqa: ANN001, ANN201
    config = {"lmcache_url": server.url, "backend": "lmcache_mp", "model_name": MODEL}
    d = DaemonProcess(tmp_path / "daemon", config={**config, "noop_backend": False}, noop=False)
    try:
        d.start(timeout=60)
        yield d
    finally:
        d.kill()


async def wait_until(check, what: str):  # noqa: ANN001, ANN201
    return await tool_turns.wait_until(check, what, timeout=120, every=0.02)


async def test_a_tool_pause_demotes_and_the_restore_prefetches_the_turns_tokens(
    steering, server, engine, start_proxy
) -> None:
    tokens = tokens_of(prompt_of(ASK))
    keys = server.keys_of(tokens, MODEL)
    want = chunk_hashes(tokens, CHUNK_TOKENS)
    assert len(want) >= 8
    proxy = await start_proxy(
        engine.url,
        steering.url,
        tool_pause_suspend_s=0.2,
        restore_wait_ms=60_000,
        lmcache_mp_url=server.url,
        lmcache_mp_model=MODEL,
    )
    hdr = {"X-Session-ID": "stock"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{proxy.url}/v1/chat/completions", json=ASK, headers=hdr) as r:
            message = (await r.json())["choices"][0]["message"]
        server.store(tokens, MODEL)  # what the engine's connector stored: L1 and L2
        # the turn's chunk hashes are the server's keys
        got = steering.event("session_map", session_id="stock")["data"]["chunk_hashes"]
        assert got == want
        # the tool pause: suspended, its keys demoted (L1 dropped, L2 kept)
        await wait_until(lambda: session_state(steering, "stock") == "suspended", "the suspend")
        await wait_until(lambda: not (keys & server.l1), "demoted")
        assert keys <= server.l2
        follow = after_tool(ASK, message, "12 passed")
        async with http.post(f"{proxy.url}/v1/chat/completions", json=follow, headers=hdr) as r:
            assert r.status == 200
    # when the request reached the engine, its prefix was back in L1
    st = proxy.lifecycle.stats
    assert (st.restores, st.restore_landed, st.restore_timed_out) == (1, 1, 0)
    assert keys <= server.l1
    prefetched = server.calls("POST", "/cache/prefetches")
    assert [p["token_ids"] for p in prefetched] == [tokens_of(prompt_of(follow))]
    # no token ids are kept once their request was handled
    await wait_until(lambda: proxy.runner.app[STOCK].in_flight == {}, "tokens dropped")


async def test_the_stock_stack_reads_the_server_and_refuses_a_foreign_hash(server, engine) -> None:
    from ramakv_proxy.stock import StockSettings, StockStack

    body = json.dumps(ASK).encode()
    async with aiohttp.ClientSession() as http:
        # the model name defaults to the engine's /v1/models root (the stand-in has none)
        stack = StockStack(StockSettings(server.url), http, engine.url)
        assert not await stack.ready() and stack.chunk_size == CHUNK_TOKENS
        stack = StockStack(StockSettings(server.url, MODEL), http, engine.url)
        keys = await stack.before("s", "/v1/chat/completions", body, [])
        assert keys == {"chunk_hashes": chunk_hashes(tokens_of(prompt_of(ASK)), CHUNK_TOKENS)}
        assert stack.in_flight["s"] == (keys, [tokens_of(prompt_of(ASK))])
        newer = await stack.before("s", "/v1/chat/completions", body, [])
        stack.after("s", keys)  # an older request's end keeps the newer one's tokens
        assert stack.in_flight["s"][0] is newer
        stack.after("s", newer)
        assert stack.in_flight == {}
        # a prefetch the server refuses (no engine registered) is a failed wait, not a raise
        server.registered.clear()
        assert await stack.prefetch(tokens_of(prompt_of(ASK)), 5.0) is None
        # a server hashing with anything but blake3: its keys cannot be computed here
        server.hash_algorithm = "sha256_cbor"
        foreign = StockStack(StockSettings(server.url, MODEL), http, engine.url)
        assert await foreign.before("s", "/v1/chat/completions", body, []) is None
        assert foreign.in_flight == {}
