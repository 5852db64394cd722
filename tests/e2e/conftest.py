"""End-to-end rigs: the real daemon process steering the real ascend_ext devserver process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon_proc import REPO_ROOT, DaemonProcess, free_port


def _get(url: str, timeout: float = 1.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return int(r.status)


@pytest.fixture
def devserver_url(tmp_path: Path) -> Iterator[str]:
    """``python -m ascend_ext_dev.devserver`` (real CPU LMCache, DDR + disk in tmp), a free port."""
    pytest.importorskip("lmcache")
    port = free_port()
    log_path = tmp_path / "devserver.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ascend_ext_dev.devserver",
                "--port",
                str(port),
                "--ddr-mb",
                "4",
                "--disk-dir",
                str(tmp_path / "kv"),
                "--chunk-size",
                "16",
            ],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, LMCACHE_TRACK_USAGE="false"),
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        # A hang guard only: the wait ends when it answers (or exits); torch + lmcache
        # imports on a loaded 2-core box have taken over a minute.
        deadline = time.monotonic() + 600
        while True:
            try:
                if _get(url + "/health") == 200:
                    break
            except (urllib.error.URLError, OSError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"devserver did not start; log tail:\n{tail}")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.fixture
def steering_daemon(tmp_path: Path, devserver_url: str) -> Iterator[DaemonProcess]:
    """A started daemon process whose LMCache backend points at the devserver (no ``--noop``:
    ``noop_backend = false`` and ``lmcache_url`` from its config take effect)."""
    d = DaemonProcess(
        tmp_path / "daemon",
        config={"lmcache_url": devserver_url, "noop_backend": False},
        noop=False,
    )
    try:
        d.start(timeout=30)
        yield d
    finally:
        d.kill()
