"""Small HTTP helpers for the real-engine tests (condition polls with generous timeouts)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from ascend_ext_dev.tiny_engine import EngineProcess, EngineSettings, free_ports

CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"
CHUNK = 256
#: Generous: a request is ~0.1-15 s on a loaded 2-core machine (first ones warm up oneDNN).
HTTP_TIMEOUT_S = 300.0
POLL_TIMEOUT_S = 120.0


def post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    r = httpx.post(url, json=body, headers=headers, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 200, (url, r.status_code, r.text[:2000])
    return r.json()


def text(words: str, tokens_about: int) -> str:
    """A prompt of roughly ``tokens_about`` tokens, distinct per ``words``."""
    return " ".join(f"{words} {i}" for i in range(tokens_about // 3))


def completion(engine_url: str, prompt: str, **kw: Any) -> dict[str, Any]:
    body = {
        "model": "tiny",
        "prompt": prompt,
        "max_tokens": 4,
        "temperature": 0,
        "return_token_ids": True,
        **kw,
    }
    return post(engine_url + "/v1/completions", body)


def chat(engine_url: str, messages: list[dict[str, str]], **kw: Any) -> dict[str, Any]:
    body = {
        "model": "tiny",
        "messages": messages,
        "max_tokens": 4,
        "temperature": 0,
        "return_token_ids": True,
        **kw,
    }
    return post(engine_url + "/v1/chat/completions", body)


def kv(answer: dict[str, Any]) -> dict[str, Any]:
    params = answer.get("kv_transfer_params")
    assert isinstance(params, dict), answer
    return params


def cached_tokens(answer: dict[str, Any]) -> int:
    """Tokens LMCache served (enable_cache_usage_details_in_response)."""
    return int(kv(answer)["num_lmcache_cached_tokens"])


def query(memory_url: str, hashes: list[str]) -> dict[str, list[str]]:
    return post(memory_url + "/memory/query", {"chunk_hashes": hashes})


def wait_where(memory_url: str, hashes: list[str], want: list[str]) -> dict[str, list[str]]:
    """/memory/query until every hash sits exactly in ``want`` (disk writes and the daemon's
    deliveries are asynchronous); returns the last answer for the assertion."""
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while True:
        got = query(memory_url, hashes)
        if all(sorted(got.get(h, [])) == sorted(want) for h in hashes):
            return got
        if time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def wait_map(daemon: Any, sid: str, want: list[str]) -> list[str] | None:
    """The daemon's map of ``sid`` once it equals ``want`` (or the last one seen)."""
    deadline = time.monotonic() + POLL_TIMEOUT_S
    while True:
        answer = daemon.event("session_map", session_id=sid)
        got = answer["data"]["chunk_hashes"] if answer.get("ok") else None
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def ok(daemon: Any, type_: str, **fields: Any) -> dict[str, Any]:
    answer = daemon.event(type_, **fields)
    assert answer["ok"], (answer, daemon.log()[-2000:])
    return answer["data"]


def prompt_ids(answer: dict[str, Any]) -> list[int]:
    """The prompt's token ids the engine ran (return_token_ids: response or first choice)."""
    ids = answer.get("prompt_token_ids") or answer["choices"][0].get("prompt_token_ids")
    assert isinstance(ids, list) and ids, answer
    return ids


#: Start-up on a loaded 2-core machine (torch, vLLM and lmcache imports, two processes).
ENGINE_START_S = 900.0


def start_engine(work_dir: Path, **kw: object) -> EngineProcess:
    """A started, ready engine on free ports (its log in work_dir/engine.log)."""
    first = free_ports(3)  # the OpenAI port, the scheduler's memory API, the worker's (+1)
    settings = EngineSettings(work_dir=work_dir, port=first, api_port_start=first + 1, **kw)  # type: ignore[arg-type]
    engine = EngineProcess(settings).start()
    try:
        engine.wait_ready(ENGINE_START_S)
    except BaseException:
        engine.stop()
        raise
    return engine
