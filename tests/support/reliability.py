"""Reliability-test helpers: read stores as ramakv-admin does, check invariants, run processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from ramakv_daemon.adapters.sqlite.admin import read_file
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.core.manager import recompute_refcounts
from ramakv_daemon.core.session import Session
from support.daemon_proc import REPO_ROOT, free_port, trace_snapshot
from support.loadgen import Model, SessionModel, model_to_json

TESTS_DIR = REPO_ROOT / "tests"


def db_model(path: Path | str) -> Model:
    """Every stored session and open fork of a SQLite file, read as ramakv-admin reads it
    (read-only, beside a running daemon); a closed session with open forks is a
    ``closed`` entry."""
    view = read_file(path)
    out = {
        s.session_id: SessionModel(list(s.chunk_hashes), s.turn_count, s.suspended)
        for s in view.sessions
    }
    for f in sorted(view.forks, key=lambda f: f.fork_id):
        s = out.setdefault(f.session_id, SessionModel(closed=True))
        s.fork_holds.append(list(f.hashes))
    return out


def db_outbox(path: Path | str) -> dict[str, str]:
    """The default namespace's stored evictions (every outbox format): hash -> mode."""
    return {e.chunk_hash: e.mode.value for e in read_file(path).outbox if e.namespace == ""}


async def set_query_only(store: SqliteSessionStore, on: bool) -> None:
    """Make SQLite refuse writes (SQLITE_READONLY) on every connection of an open store,
    or take them again: ``PRAGMA query_only`` on its read connection, and on its write
    connection from the writer thread, between two commits (the store's internals: a
    fault only a test injects)."""
    pragma = f"PRAGMA query_only={int(on)}"
    await store.db.execute(pragma)
    writer = store._writer  # the connection commits go through
    assert writer is not None, "the store is not open"
    await store._on_writer(writer.execute, pragma)


def as_sessions(model: Model) -> list[Session]:
    """Core Session values for :func:`recompute_refcounts`."""
    return [
        Session(sid, tuple(s.chunk_hashes), s.turn_count, s.suspended) for sid, s in model.items()
    ]


def model_refcounts(model: Model) -> dict[str, int]:
    """Refcounts recomputed from first principles (each model hold is one open fork)."""
    from ramakv_daemon.core.fork import Fork

    forks = [Fork(0, sid, tuple(h), 0.0) for sid, s in model.items() for h in s.fork_holds]
    return recompute_refcounts(as_sessions(model), forks)


def snapshot_model(snapshot: dict[str, Any]) -> Model:
    """The sessions of a trace snapshot as a model."""
    out = {
        sid: SessionModel(
            list(s["chunk_hashes"]),
            int(s["turn_count"]),
            s["state"] == "suspended",
            [list(h) for h in s["fork_holds"]],
        )
        for sid, s in snapshot["sessions"].items()
    }
    for f in sorted(snapshot.get("forks", {}).values(), key=lambda f: f["fork_id"]):
        if f["session_id"] not in snapshot["sessions"]:
            s = out.setdefault(f["session_id"], SessionModel(closed=True))
            s.fork_holds.append(list(f["chunk_hashes"]))
    return out


def live_state(url: str) -> tuple[Model, dict[str, int]]:
    """A running daemon's sessions and refcounts (the trace stream's snapshot)."""
    snap = asyncio.run(trace_snapshot(url))
    return snapshot_model(snap), snap["refcounts"]


def diff(a: Model, b: Model, limit: int = 5) -> list[str]:
    """Human-readable differences between two models (empty when equal)."""
    out = []
    for sid in sorted(set(a) | set(b)):
        if a.get(sid) != b.get(sid):
            out.append(f"{sid}: {a.get(sid)} != {b.get(sid)}")
    return out[:limit]


def http_json(url: str, body: Any | None = None, timeout: float = 10.0) -> Any:
    """GET (body None) or POST JSON; the decoded answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def metric(url: str, name: str, headers: dict[str, str] | None = None) -> float:
    """Sum of every sample of ``name`` in a daemon's /metrics."""
    req = urllib.request.Request(f"{url}/metrics", headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(pred: Any, timeout: float = 120.0, every: float = 0.05) -> bool:
    """Poll ``pred()`` until true or ``timeout``; returns the last verdict."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(every)


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class FakeLMCacheProcess:
    """tests/support/lmcache_server.py in its own process, driven over its /_fake/ routes."""

    def __init__(
        self, workdir: Path, port: int | None = None, extra_args: list[str] | None = None
    ) -> None:
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.log_path = Path(workdir) / "fake_lmcache.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeLMCacheProcess:
        """Start and wait until it answers."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(TESTS_DIR / "support" / "lmcache_server.py"),
                    "--port",
                    str(self.port),
                    *self.extra_args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(REPO_ROOT),
                env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
            )
        if not wait_for(self._up, 20):
            raise RuntimeError(f"fake lmcache did not start: {self.log_path.read_text()[-2000:]}")
        return self

    def _up(self) -> bool:
        try:
            self.requests()
            return True
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL it (the port then refuses connections)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def fail(self, mode: str | None, times: int | None = None, delay: float = 0.0) -> None:
        """Fail the next ``times`` memory calls (None: until healed) in ``mode``."""
        http_json(f"{self.url}/_fake/fail", {"mode": mode, "times": times, "delay": delay})

    def state(self) -> dict[str, Any]:
        """Pending deferred deletes, deletes carried out, the store probe's findings."""
        return http_json(f"{self.url}/_fake/state")

    def requests(self) -> list[dict[str, Any]]:
        """Every request received, oldest first."""
        return http_json(f"{self.url}/_fake/requests")

    def evicted(self) -> list[str]:
        """Every hash received in an evict call (failed or not)."""
        return [
            h
            for r in self.requests()
            if r["path"] == "/memory/evict"
            for h in (r["body"] or {}).get("chunk_hashes", [])
        ]


def daemon_state(daemon: Any) -> dict[str, Any]:
    """An in-process daemon's sessions and refcounts, and the rows of its SQLite file."""
    m = daemon.default.manager
    path = daemon.config.session_store_path
    return {
        "sessions": {sid: s.to_dict() for sid, s in m.sessions.items()},
        "refcounts": m.refcounts.as_dict(),
        "db": model_to_json(db_model(path)) if Path(path).exists() else {},
        "outbox": db_outbox(path) if Path(path).exists() else {},
    }


def run_loadgen(
    url: str,
    workdir: Path,
    model: Model,
    seed: int,
    *,
    mode: str = "stop",
    duration: float = 20.0,
    max_events: int = 4000,
    rate: float = 0.0,
    sessions: int = 12,
    hex_hashes: bool = False,
) -> subprocess.Popen[str]:
    """Start the load generator process on ``model``; it prints ``ready`` when under way."""
    state = workdir / f"state{seed}.json"
    state.write_text(json.dumps(model_to_json(model)))
    return subprocess.Popen(
        [
            sys.executable,
            str(TESTS_DIR / "support" / "loadgen.py"),
            "--url",
            url,
            "--out",
            str(workdir / f"result{seed}.json"),
            "--state-in",
            str(state),
            "--sessions",
            str(sessions),
            "--seed",
            str(seed),
            "--prefix",
            f"r{seed}",
            "--mode",
            mode,
            "--duration",
            str(duration),
            "--max-events",
            str(max_events),
            "--rate",
            str(rate),
            *(["--hex"] if hex_hashes else []),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str], timeout: float = 20.0) -> None:
    """Block until the load generator printed ``ready`` (or fail with its output)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == "ready":
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"load generator not ready: {proc.stdout.read()}")


def finish(proc: subprocess.Popen[str], workdir: Path, seed: int) -> dict[str, Any]:
    """Wait for the load generator; its result document."""
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return json.loads((workdir / f"result{seed}.json").read_text())
