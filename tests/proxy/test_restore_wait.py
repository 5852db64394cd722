"""The restore's bounded wait against a real cache: the ascend_ext devserver (a real CPU
LMCache with DDR and disk tiers) steered by a real daemon, the proxy in front of the
stand-in engine. The stand-in's chunk hashes are the devserver's for the same tokens (one
per byte, 16-token chunks), so the devserver holds exactly the chunks the turns name."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import httpx
import pytest
from support import tool_turns
from support.daemon_proc import DaemonProcess
from support.memapi_rig import devserver
from support.openai_engine import chunk_hashes, prompt_of, tokens_of
from support.tool_turns import ASK, after_tool, session_state

from ramakv_proxy import ManualClock
from ramakv_sdk.client import AsyncClient
from ramakv_sdk.lifecycle.landing import LandingWait

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"


@pytest.fixture
def cache(tmp_path) -> Iterator[str]:  # noqa: ANN001
    with devserver("--disk-dir", str(tmp_path / "disk"), "--ddr-mb", "64") as (url, _):
        yield url


@pytest.fixture
def steering(tmp_path, cache: str) -> Iterator[DaemonProcess]:  # noqa: ANN001
    d = DaemonProcess(
        tmp_path / "daemon", config={"lmcache_url": cache, "noop_backend": False}, noop=False
    )
    try:
        d.start(timeout=60)
        yield d
    finally:
        d.kill()


async def wait_until(check, what: str):  # noqa: ANN001, ANN201
    return await tool_turns.wait_until(check, what, timeout=300, every=0.05)


def where(cache: str, hashes: list[str]) -> dict[str, list[str]]:
    return httpx.post(f"{cache}/memory/query", json={"chunk_hashes": hashes}, timeout=30).json()


async def test_the_next_request_waits_until_the_restored_chunks_are_in_ddr(
    steering, cache, engine, start_proxy
) -> None:
    # The engine's prefill of the first turn: its chunks are stored in DDR and on disk.
    turn = httpx.post(
        f"{cache}/engine/turn", json={"token_ids": tokens_of(prompt_of(ASK))}, timeout=60
    ).json()
    hashes = turn["kv_transfer_params"]["chunk_hashes"]
    assert hashes == chunk_hashes(prompt_of(ASK)) and len(hashes) >= 8
    await wait_until(lambda: all(where(cache, hashes)[h] == [CPU, DISK] for h in hashes), "stored")
    # The real clock: the tool pause is short, the wait's bound a hang guard.
    proxy = await start_proxy(
        engine.url, steering.url, tool_pause_suspend_s=0.2, restore_wait_ms=60_000
    )
    hdr = {"X-Session-ID": "waits"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{proxy.url}/v1/chat/completions", json=ASK, headers=hdr) as r:
            message = (await r.json())["choices"][0]["message"]
        assert message["tool_calls"]
        # the tool pause (a declared suspend): its chunks demoted out of DDR, kept on disk
        await wait_until(lambda: session_state(steering, "waits") == "suspended", "the suspend")
        await wait_until(lambda: all(where(cache, hashes)[h] == [DISK] for h in hashes), "demoted")
        follow = after_tool(ASK, message, "12 passed")
        async with http.post(f"{proxy.url}/v1/chat/completions", json=follow, headers=hdr) as r:
            assert r.status == 200
        # when the request reached the engine, every chunk was back in DDR
        st = proxy.lifecycle.stats
        assert (st.restores, st.restore_landed, st.restore_timed_out) == (1, 1, 0)
        assert st.restore_chunks_held == st.restore_chunks_in_ddr == len(set(hashes))
    assert all(CPU in where(cache, hashes)[h] for h in hashes)


async def test_a_wait_past_its_deadline_forwards_with_the_chunks_still_out(steering, cache) -> None:
    """Chunks on disk and no prefetch: the wait ends at its deadline, saying how many of the
    held chunks were in DDR (none)."""
    tokens = list(range(1, 1 + 4 * 16))
    turn = httpx.post(f"{cache}/engine/turn", json={"token_ids": tokens}, timeout=60).json()
    hashes = turn["kv_transfer_params"]["chunk_hashes"]
    steering.event("turn_end", session_id="late", kv_transfer_params={"chunk_hashes": hashes})
    httpx.post(
        f"{cache}/memory/evict", json={"chunk_hashes": hashes, "locations": [CPU]}, timeout=30
    )
    await wait_until(lambda: all(where(cache, hashes)[h] == [DISK] for h in hashes), "on disk only")
    clock = ManualClock()
    client = AsyncClient(steering.url)
    try:
        landing = await LandingWait(client, clock, 0.01).wait("late", deadline=clock.now())
    finally:
        await client.aclose()
    assert (landing.outcome, landing.held, landing.in_ddr) == ("timeout", 4, 0)
