"""Starts the real stock LMCache multiprocess server (lmcache 0.5.6) as a child process."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

# A hang guard only: the server is ready in ~20 s on a loaded 2-core machine.
START_LIMIT_S = 240.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class MPServer:
    """A running server: its ZMQ port (vLLM's lmcache.mp.port), HTTP URL and L2 folder."""

    port: int
    url: str
    l2_dir: Path
    log: Path


def server_args(port: int, http_port: int, l2_dir: Path, chunk_size: int = 256) -> list[str]:
    """The issue's command line; ``auto`` is required on CPU (vLLM-CPU registers in
    engine_driven mode, which the default lmcache_driven server does not serve)."""
    return [
        sys.executable,
        "-m",
        "lmcache.v1.multiprocess.http_server",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--http-host", "127.0.0.1",
        "--http-port", str(http_port),
        "--chunk-size", str(chunk_size),
        "--l1-size-gb", "1",
        "--l1-init-size-gb", "1",
        "--eviction-policy", "LRU",
        "--l2-adapter", json.dumps({"type": "fs", "base_path": str(l2_dir)}),
        "--supported-transfer-mode", "auto",
    ]  # fmt: skip


@contextlib.contextmanager
def mp_server(
    workdir: Path, port: int | None = None, http_port: int | None = None
) -> Iterator[MPServer]:
    """Start the server (its L2 under ``workdir/l2``), wait for /healthcheck, stop it after."""
    l2 = workdir / "l2"
    l2.mkdir(parents=True, exist_ok=True)
    port, http_port = port or free_port(), http_port or free_port()
    log = workdir / f"lmcache_mp_{http_port}.log"
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            server_args(port, http_port, l2), stdout=out, stderr=subprocess.STDOUT, env=env
        )
    url = f"http://127.0.0.1:{http_port}"
    try:
        deadline = time.monotonic() + START_LIMIT_S
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
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
