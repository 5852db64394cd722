"""What the daemon has imported when its port starts listening, on an empty SQLite store
with the noop backend (issue 24: exec to listening under 0.3 s, bench/startup.py measures
it): nothing that store, backend and the serving side do not need. A guard on names, not a
timing: each of these cost start-up milliseconds before it was deferred."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support.daemon_proc import free_port

# Each with what needs it: none does before the port listens.
NOT_BEFORE_LISTENING = {
    "prometheus_client": "the metrics' registry (built once listening, or at the first count)",
    "importlib.metadata": "the version (a log line at INFO, /healthz, the build info)",
    "ramakv_sdk": "the host SDK (the daemon reads the version from ramakv_protocol)",
    "ramakv_console": "the console",
    "textual": "the console",
    "hypothesis": "tests",
    "httpx": "the LMCache backend (noop here)",
    "ramakv_daemon.adapters.backends.lmcache": "the LMCache backend (noop here)",
    "asyncpg": "the PostgreSQL store (SQLite here)",
    "ramakv_daemon.adapters.postgres": "the PostgreSQL store (SQLite here)",
    "ramakv_daemon.cli": "ramakv-admin, ram-a-kv-identity",
    "ramakv_daemon.admin_port": "ramakv-admin",
    "ramakv_daemon.http.trace_ws": "the first GET /trace",
    "ramakv_daemon.telemetry.gauges": "the first GET /metrics",
    "tomli_w": "--check-config",
    "numpy": "the count arrays of a loaded store (core.rebuild): an empty one has none",
}

# The real entry point (main), in a process of its own; the moment every site listens is
# taken inside aiohttp's TCPSite.start, then the daemon stops as on SIGTERM.
PROBE = """
import json, sys
import aiohttp.web_runner as runner

started = runner.TCPSite.start
seen = []

async def start(self):
    await started(self)
    seen.append(sorted(sys.modules))
    raise runner.GracefulExit()

runner.TCPSite.start = start
from ramakv_daemon.__main__ import main

code = main(["--config", sys.argv[1], "--log-level", "WARNING"])
print(json.dumps({"exit": code, "modules": seen[0] if seen else None}))
"""


def loaded_when_listening(tmp_path: Path, noop: bool = True) -> list[str]:
    cfg = tmp_path / "config.toml"
    cfg.write_text(
        f'listen_addr = "127.0.0.1:{free_port()}"\nnoop_backend = {str(noop).lower()}\n'
        f'session_store_path = "{tmp_path / "s.db"}"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["exit"] == 0 and out["modules"] is not None, proc.stdout + proc.stderr
    return out["modules"]


def heavy(modules: list[str]) -> dict[str, str]:
    return {
        m: why
        for m, why in NOT_BEFORE_LISTENING.items()
        if any(name == m or name.startswith(m + ".") for name in modules)
    }


def test_an_empty_sqlite_store_with_the_noop_backend_listens_without_them(
    tmp_path: Path,
) -> None:
    modules = loaded_when_listening(tmp_path)
    assert "ramakv_daemon.adapters.sqlite.store" in modules  # it did start the daemon
    assert heavy(modules) == {}


def test_the_guard_sees_what_the_configured_backend_needs(tmp_path: Path) -> None:
    # Not vacuous: with LMCache configured (nothing listens there; the daemon starts all
    # the same) its adapter and httpx are loaded before listening, and named.
    modules = loaded_when_listening(tmp_path, noop=False)
    assert {"httpx", "ramakv_daemon.adapters.backends.lmcache"} <= set(heavy(modules))
