"""Helpers for memory-API tests: CPU engines in fresh dirs, loopback servers, devserver procs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from support.daemon_proc import free_port

REPO = Path(__file__).resolve().parents[2]
# The tier names the memory API answers with (LMCache's backend names).
CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"


@contextmanager
def cpu_engine(disk_dir: Path, **spec: Any) -> Iterator[Any]:
    """A real two-tier engine (DDR + disk in disk_dir), destroyed afterwards."""
    from ascend_ext.memory_api import forget_engine
    from ascend_ext_dev.cpu_engine import EngineSpec, build_engine, destroy_engine

    s = EngineSpec(disk_dir=str(disk_dir), instance_id="t-" + uuid.uuid4().hex[:10], **spec)
    engine = build_engine(s)
    try:
        yield engine
    finally:
        forget_engine(engine)
        destroy_engine(s)


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Run an ASGI app with uvicorn in a thread on a loopback port; yields its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", loop="asyncio", http="h11"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def devserver(
    *args: str, port: int | None = None, hash_seed: str = "random", start_timeout: float = 300.0
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``python -m ascend_ext_dev.devserver`` in a child process; yields (url, process).

    Chunk hashes are blake3 chains, so processes with different PYTHONHASHSEEDs agree.
    """
    port = port or free_port()
    env = dict(os.environ, LMCACHE_TRACK_USAGE="false", PYTHONHASHSEED=hash_seed)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ascend_ext_dev.devserver", "--port", str(port), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # a hang guard: start-up imports torch + LMCache
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"devserver on {port} did not start")
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def on_disk(client: Any, hashes: list[str], base: str = "") -> bool:
    """Whether every chunk of ``hashes`` has its disk copy (POST /memory/query; ``client``
    an httpx.Client, or the httpx module with ``base`` the memory API's URL)."""
    got = client.post(base + "/memory/query", json={"chunk_hashes": hashes}).json()
    return all(DISK in v for v in got.values())


def wait_prefetch(client: httpx.Client, lookup_id: str, timeout: float = 120.0) -> dict:
    """Poll GET /memory/prefetch/{id} until it has ended (done, cancelled or failed)."""
    deadline = time.monotonic() + timeout
    while True:
        r = client.get(f"/memory/prefetch/{lookup_id}")
        if r.status_code == 200 and r.json()["state"] in ("done", "cancelled", "failed"):
            return r.json()
        if time.monotonic() > deadline:
            raise AssertionError(f"prefetch {lookup_id} not done: {r.text}")
        time.sleep(0.02)


def tokens(n_chunks: int, start: int = 1, chunk: int = 16) -> list[int]:
    """A prompt of n full chunks."""
    return list(range(start, start + n_chunks * chunk))
