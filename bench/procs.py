"""Start and stop the processes a benchmark measures (daemon, bare server) on free ports."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(port: int, path: str = "/event", timeout: float = 30.0) -> None:
    """Block until the server at ``port`` answers a POST of {"type":"health"}."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}{path}", data=b'{"type":"health"}', method="POST"
            )
            urllib.request.urlopen(req, timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not come up")


def stop(proc: subprocess.Popen, wait_s: float = 10.0) -> None:
    """SIGTERM ``proc``, SIGKILL it when it outlives ``wait_s``."""
    proc.terminate()
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def daemon(
    store: str | None = None,
    log_level: str = "WARNING",
    extra_config: str = "",
    noop: bool = True,
    root: Path | None = None,
) -> Iterator[tuple[int, subprocess.Popen]]:
    """A real daemon (SQLite on disk; noop backend unless ``noop=False``, then extra_config
    names its lmcache_url) on a free port; yields (port, process). ``root``: another
    checkout whose daemon runs (a before/after comparison in one run; default this one)."""
    with tempfile.TemporaryDirectory(prefix="ramakv-bench-") as tmp:
        port = free_port()
        cfg = Path(tmp) / "config.toml"
        cfg.write_text(
            f'listen_addr = "127.0.0.1:{port}"\nnoop_backend = {str(noop).lower()}\n'
            f'session_store_path = "{store or Path(tmp) / "sessions.db"}"\n{extra_config}'
        )
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if root is not None:  # on PYTHONPATH too: the venv may install this one (editable)
            env["PYTHONPATH"] = str(root)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ramakv_daemon", "--config", str(cfg), "--log-level", log_level],
            cwd=root or ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Another root on PYTHONPATH too: the venv may hold this one as an editable install.
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                **({"PYTHONPATH": str(root)} if root else {}),
            },
        )
        try:
            wait_http(port, timeout=300)
            yield port, proc
        finally:
            stop(proc)


@contextlib.contextmanager
def proxy(
    upstream: str, daemon_url: str, log: Path, flags: list[str], log_level: str = "WARNING"
) -> Iterator[str]:
    """``python -m ramakv_proxy`` in front of ``upstream`` on a free port, its output in
    ``log``; yields its URL once ``/_ramakv/stats`` answers."""
    port = free_port()
    argv = [sys.executable, "-m", "ramakv_proxy", "--upstream", upstream]
    argv += ["--daemon", daemon_url, "--listen", f"127.0.0.1:{port}", "--log-level", log_level]
    # Its pending suspends and closes beside its log: under the default state folder a
    # later run's proxy on the same port would restore this run's sessions.
    env = {**os.environ, "XDG_STATE_HOME": str(log.parent / f"proxy-state-{port}")}
    with open(log, "wb") as out:
        proc = subprocess.Popen([*argv, *flags], stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/_ramakv/stats", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("ramakv-proxy did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(15)


@contextlib.contextmanager
def bare_server(module: str = "bench.bare_server") -> Iterator[int]:
    """The bare aiohttp reference server on a free port (``module``: another reference, such
    as bench.floor_server)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(port)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
