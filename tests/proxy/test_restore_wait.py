"""The restore's bounded wait against a real cache: the ascend_ext devserver (a real CPU
LMCache with DDR and disk tiers) steered by a real daemon, the proxy in front of the
stand-in engine. The stand-in's chunk hashes are the devserver's for the same tokens (one
per byte, 16-token chunks), so the devserver holds exactly the chunks the turns name."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiohttp
import httpx
import pytest
from support.daemon_proc import DaemonProcess
from support.memapi_rig import devserver
from support.openai_engine import chunk_hashes, prompt_of, tokens_of

from ramakv_sdk.client import AsyncClient
from ramakv_sdk.proxy import ManualClock
from ramakv_sdk.proxy.landing import LandingWait

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
ASK = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "A long shared system prompt for every agent. " * 4},
        {"role": "user", "content": "Run the tests under src, please."},
    ],
    "tools": TOOLS,
}


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
    """Poll ``check()`` until truthy, yielding to the loop (the in-process proxy's timers
    run on it); the deadline is a hang guard, not a time bound."""
    deadline = time.monotonic() + 300
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return got


def where(cache: str, hashes: list[str]) -> dict[str, list[str]]:
    return httpx.post(f"{cache}/memory/query", json={"chunk_hashes": hashes}, timeout=30).json()


def state(daemon: DaemonProcess, sid: str) -> str | None:
    listed = daemon.event("list_sessions")["data"]["sessions"]
    return next((s["state"] for s in listed if s["session_id"] == sid), None)


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
        # the tool pause: suspended, its chunks ordered cold (ascend_ext has /memory/order:
        # nothing is removed); then the engine needs the room and they leave DDR first
        # (done by hand here, as the engine's allocator would)
        await wait_until(lambda: state(steering, "waits") == "suspended", "the suspend")
        httpx.post(
            f"{cache}/memory/evict", json={"chunk_hashes": hashes, "locations": [CPU]}, timeout=30
        )
        await wait_until(lambda: all(where(cache, hashes)[h] == [DISK] for h in hashes), "on disk")
        call = message["tool_calls"][0]
        follow = {
            **ASK,
            "messages": [
                *ASK["messages"],
                message,
                {"role": "tool", "tool_call_id": call["id"], "content": "12 passed"},
            ],
        }
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
