"""ramakv-proxy with the stand-in engine and a real daemon."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
from support.daemon_proc import free_port
from support.openai_engine import CHUNK_TOKENS, chunk_hashes, prompt_of
from support.trace_events import session_records
from yarl import URL

HANG_GUARD_S = 120.0  # a hang fails the test; nothing here is timed

CHAT = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are a careful agent with a long shared prompt."},
        {"role": "user", "content": "List the files in the repository, then summarise them."},
    ],
}


async def until(check) -> None:  # noqa: ANN001
    """Poll ``check()`` on the loop until true (the in-process proxy runs on it)."""
    for _ in range(int(HANG_GUARD_S / 0.01)):  # a hang guard, not a time bound
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{check} never held")


def expected_hashes(body: dict) -> list[str]:
    return chunk_hashes(prompt_of(body))


def session_map(daemon, sid: str) -> list[str] | None:
    answer = daemon.event("session_map", session_id=sid)
    return answer["data"]["chunk_hashes"] if answer["ok"] else None


async def session_events(daemon, sid: str) -> list[str]:
    """Types of the turn_* trace records of ``sid`` (the daemon's replay ring, from seq 0)."""
    records = await session_records(daemon.url, sid)
    return [m["type"] for m in records if m["type"].startswith("turn_")]


async def test_non_streaming_chat_reports_the_turn(daemon_proc, engine, start_proxy) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url)
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/chat/completions", json=CHAT, headers={"X-Session-Id": "agent-1"}
        ) as r:
            assert r.status == 200
            via_proxy = await r.json()
        async with http.post(f"{engine.url}/v1/chat/completions", json=CHAT) as r:
            direct = await r.json()
    for answer in (via_proxy, direct):
        answer.pop("created")
    assert via_proxy == direct
    assert await proxy.sender.flush(120)
    assert session_map(daemon_proc, "agent-1") == expected_hashes(CHAT)
    assert await session_events(daemon_proc, "agent-1") == ["turn_start", "turn_end"]
    assert proxy.sender.stats.sent == 2


async def test_streaming_is_relayed_as_it_comes(daemon_proc, engine, start_proxy) -> None:
    """The first chunk reaches the client while the engine still holds the rest: a proxy
    that buffered the stream would have nothing to give until the engine finished (the
    hang guard). What relaying costs is bench.proxy_overhead's figure, not this test's."""
    proxy = await start_proxy(engine.url, daemon_proc.url)
    body = {**CHAT, "stream": True, "user": "agent-2"}
    hold = engine.hold("agent-2")
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/chat/completions", json=body, headers={"X-Engine-Hold": "agent-2"}
        ) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/event-stream")
            raw = await asyncio.wait_for(r.content.readuntil(b"\n\n"), HANG_GUARD_S)
            assert hold.sent == 1 and not hold.done  # the engine holds every other chunk
            assert raw.startswith(b"data: ") and b"[DONE]" not in raw
            hold.release()
            raw += await asyncio.wait_for(r.content.read(), HANG_GUARD_S)
    lines = [ln for ln in raw.decode().split("\n") if ln.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    # As vLLM 0.32: nothing in the stream carries kv_transfer_params, and the proxy adds none.
    assert b"kv_transfer_params" not in raw
    assert await proxy.sender.flush(120)
    # The hashes came from the engine's /tokenize, hashed as ascend_ext's connector does.
    assert session_map(daemon_proc, "agent-2") == expected_hashes(CHAT)
    asked = [r for r in engine.requests if r["path"] == "/tokenize"]
    assert len(asked) == 1 and set(asked[0]["body"]) == {"model", "messages"}


async def test_streaming_completions_endpoint(daemon_proc, engine, start_proxy) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url)
    body = {"model": "m", "prompt": "x" * 100, "stream": True}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/completions", json=body, headers={"X-Session-Id": "c1"}
        ) as r:
            await r.read()
    assert await proxy.sender.flush(120)
    assert (
        session_map(daemon_proc, "c1") == chunk_hashes("x" * 100)
        and len(chunk_hashes("x" * 100)) == 6
    )


async def test_streamed_turn_under_one_chunk_empties_the_map(
    daemon_proc, engine, start_proxy
) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url)
    async with aiohttp.ClientSession() as http:
        for sid, prompt in (("short", "y" * 40), ("shorter", "y" * 5)):  # 2 chunks, then []
            async with http.post(
                f"{proxy.url}/v1/completions",
                headers={"X-Session-Id": sid},
                json={"model": "m", "prompt": prompt, "stream": True},
            ) as r:
                await r.read()
            assert await proxy.sender.flush(120)
            assert session_map(daemon_proc, sid) == chunk_hashes(prompt)
    assert chunk_hashes("y" * 5) == []
    # The shorter prompt under the first session does not extend its context: a side call,
    # reported as the session's branch, so the session's map stays (test_branch.py).
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/completions",
            headers={"X-Session-Id": "short"},
            json={"model": "m", "prompt": "y" * 5, "stream": True},
        ) as r:
            await r.read()
    assert await proxy.sender.flush(120)
    assert session_map(daemon_proc, "short") == chunk_hashes("y" * 40)


async def test_hashes_disagreeing_with_the_engine_stop_streamed_turn_ends(
    daemon_proc, engine, start_proxy
) -> None:
    """A proxy whose chunk size differs from the engine's finds out on the first non-streamed
    turn (its hashes of the tokenised prompt differ from the engine's) and sends no wrong
    maps after it."""
    proxy = await start_proxy(engine.url, daemon_proc.url, chunk_size=CHUNK_TOKENS * 2)
    hdr = {"X-Session-Id": "mismatch"}
    async with aiohttp.ClientSession() as http:
        await (await http.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=hdr)).read()
        async with http.post(
            f"{proxy.url}/v1/chat/completions",
            headers=hdr,
            json={**CHAT, "stream": True},  # the same prompt again: no branch
        ) as r:
            await r.read()
    assert await proxy.sender.flush(120)
    assert session_map(daemon_proc, "mismatch") == expected_hashes(CHAT)  # the engine's own
    assert await session_events(daemon_proc, "mismatch") == ["turn_start", "turn_end", "turn_start"]


async def test_requests_without_a_session_send_nothing(daemon_proc, engine, start_proxy) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{proxy.url}/v1/chat/completions", json=CHAT) as r:
            assert r.status == 200 and "kv_transfer_params" in await r.json()
    assert await proxy.sender.flush(120)
    assert proxy.sender.stats.as_dict()["sent"] == 0
    assert daemon_proc.event("health")["data"]["sessions_count"] == 0


async def test_answers_without_hashes_send_no_turn_end_and_warn_once(
    daemon_proc,
    engine,
    start_proxy,
    caplog,  # type: ignore[no-untyped-def]
) -> None:
    """The daemon refuses a turn_end without a list, so the proxy never sends one: the map
    stays, and the proxy says once per upstream that its connector looks unconfigured."""
    import logging

    proxy = await start_proxy(engine.url, daemon_proc.url)
    hdr = {"X-Session-Id": "s"}
    with caplog.at_level(logging.WARNING, logger="ramakv_proxy"):
        async with aiohttp.ClientSession() as http:
            await (
                await http.post(f"{proxy.url}/v1/chat/completions", json=CHAT, headers=hdr)
            ).read()
            for mode, stream in (
                ("null-hashes", False),
                ("none", False),
                ("null-hashes", True),
                ("none", True),
            ):
                async with http.post(
                    f"{proxy.url}/v1/chat/completions",
                    json={**CHAT, "stream": stream},
                    headers={**hdr, "X-Engine-Params": mode},
                ) as r:
                    assert r.status == 200
                    await r.read()
        assert await proxy.sender.flush(120)
    assert session_map(daemon_proc, "s") == expected_hashes(CHAT)
    # Answers without a list send no turn_end at all (a missing list is an engine fault); a
    # streamed one gets its list from /tokenize, unless that fails too ("none": a 404).
    assert await session_events(daemon_proc, "s") == [
        "turn_start",
        "turn_end",
        "turn_start",
        "turn_start",
        "turn_start",
        "turn_end",
        "turn_start",
    ]
    listed = daemon_proc.event("list_sessions")["data"]["sessions"]
    assert listed[0]["turn_count"] == 2 and proxy.sender.stats.failed == 0  # turn_ends
    assert proxy.sender.stats.sent == 7  # five turn_starts, two turn_ends with a list
    warned = [r.getMessage() for r in caplog.records if "chunk_hashes" in r.getMessage()]
    assert warned == [
        f"answers from {engine.url} carry no kv_transfer_params.chunk_hashes: no turn_end "
        "is sent for them (is ascend_ext's connector configured?)"
    ]


async def test_daemon_down_never_breaks_the_chat(engine, start_proxy) -> None:
    proxy = await start_proxy(engine.url, f"http://127.0.0.1:{free_port()}", retry_for=0.3)
    async with aiohttp.ClientSession() as http:
        for stream in (False, True):
            async with http.post(
                f"{proxy.url}/v1/chat/completions",
                json={**CHAT, "stream": stream},
                headers={"X-Session-Id": "s"},
            ) as r:
                assert r.status == 200
                # Non-streamed answers carry them; streams (as vLLM 0.32) do not.
                assert (b"kv_transfer_params" in await r.read()) is not stream
    assert await proxy.sender.flush(120)
    assert proxy.sender.stats.dropped_unavailable == 4


async def test_engine_errors_pass_through_without_turn_end(
    daemon_proc, engine, start_proxy
) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url)
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{proxy.url}/v1/chat/completions",
            json=CHAT,
            headers={"X-Session-Id": "e", "X-Engine-Status": "503"},
        ) as r:
            assert r.status == 503
            assert (await r.json())["error"]["message"] == "stand-in failure"
    assert await proxy.sender.flush(120)
    assert await session_events(daemon_proc, "e") == ["turn_start"]


async def test_everything_else_is_forwarded_unchanged(daemon_proc, engine, start_proxy) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{proxy.url}/v1/models") as r:
            assert (await r.json())["data"][0]["id"] == "stand-in-model"
        async with http.put(
            URL(f"{proxy.url}/any/path?a=1&b=%2F", encoded=True),
            data=b"\x00raw body",
            headers={"X-Custom": "yes", "Authorization": "Bearer up"},
        ) as r:
            echo = await r.json()
            assert r.headers["X-Engine-Echo"] == "1"
    assert (echo["method"], echo["raw_path"]) == ("PUT", "/any/path?a=1&b=%2F")
    assert echo["headers"]["X-Custom"] == "yes"
    assert echo["headers"]["Authorization"] == "Bearer up"
    assert echo["body"] == "\x00raw body"
    assert proxy.sender.stats.sent == 0


async def test_engine_down_answers_502(daemon_proc, start_proxy) -> None:
    proxy = await start_proxy(f"http://127.0.0.1:{free_port()}", daemon_proc.url)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{proxy.url}/v1/chat/completions", json=CHAT) as r:
            assert r.status == 502
            assert (await r.json())["error"]["type"] == "upstream_unavailable"


async def test_console_script_end_to_end(daemon_proc, engine, tmp_path: Path) -> None:
    port = free_port()
    exe = Path(sys.executable).with_name("ramakv-proxy")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [
            str(exe),
            "--upstream",
            engine.url,
            "--listen",
            f"127.0.0.1:{port}",
            "--daemon",
            daemon_proc.url,
            "--chunk-size",
            str(CHUNK_TOKENS),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(1200):  # hang guard: a loaded machine starts the proxy slowly
                try:
                    async with http.get(f"http://127.0.0.1:{port}/_ramakv/stats") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
            async with http.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                json={**CHAT, "stream": True, "user": "cli-agent"},
            ) as r:
                assert r.status == 200
                await r.read()
            for _ in range(2400):  # hang guard
                async with http.get(f"http://127.0.0.1:{port}/_ramakv/stats") as r:
                    st = await r.json()
                if st["sent"] == 2:
                    break
                await asyncio.sleep(0.05)
        assert session_map(daemon_proc, "cli-agent") == expected_hashes(CHAT)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0, out.decode()


async def test_client_leaving_mid_stream(daemon_proc, engine, start_proxy) -> None:
    """The client goes away after the first chunk: the proxy survives, sends no turn_end
    (no kv_transfer_params went by), and the next request is served."""
    proxy = await start_proxy(engine.url, daemon_proc.url)
    async with aiohttp.ClientSession() as http:
        r = await http.post(
            f"{proxy.url}/v1/chat/completions",
            json={**CHAT, "stream": True},
            headers={"X-Session-Id": "gone", "X-Engine-Hold": "gone"},
        )
        hold = engine.hold("gone")
        await asyncio.wait_for(r.content.readany(), HANG_GUARD_S)
        r.close()  # drop the connection while the engine holds the rest
        await until(proxy.clients_gone)
        hold.allow(2)  # one more chunk on its own: relaying it finds the client gone
        await until(lambda: proxy.lifecycle.stats.closes_disconnect == 1)
        hold.release()  # the engine writes the rest into the void, and returns
        await asyncio.wait_for(hold.until(lambda h: h.done), HANG_GUARD_S)
        async with http.post(
            f"{proxy.url}/v1/chat/completions", json=CHAT, headers={"X-Session-Id": "next"}
        ) as r2:
            assert r2.status == 200
    assert await proxy.sender.flush(120)
    assert await session_events(daemon_proc, "gone") == ["turn_start"]
    assert session_map(daemon_proc, "next") == expected_hashes(CHAT)
