"""A real ram-a-kv daemon in a subprocess on a free loopback port, for any test suite.

Usage (tests/conftest.py registers the fixtures for every suite; import the class and the
helpers as ``support.daemon_proc``)::

    def test_something(daemon_proc):            # started, healthy, killed at teardown
        status, body = daemon_proc.post({"type": "health"})
        assert body["ok"]

    def test_restart(daemon_proc_factory):
        d = daemon_proc_factory(config={"max_hashes_per_event": 10})
        d.post({"type": "turn_end", "session_id": "s", "kv_transfer_params": {...}})
        d.kill()                                # SIGKILL (or d.stop() for SIGTERM)
        d.start()                               # same SQLite file, same port if free
        ...

What you get: the daemon runs as ``python -m ramakv_daemon --noop --listen 127.0.0.1:PORT
--store FILE --config FILE`` from this venv (``noop=False`` drops ``--noop``, for a daemon that
talks to the LMCache its config names), with a config file written into its own temp
directory (so /etc/ram-a-kv/config.toml and $RAM_A_KV_CONFIG never leak in), its stdout and
stderr in ``log_path`` (read it with :meth:`DaemonProcess.log`), and ``url`` to talk to.
:meth:`DaemonProcess.start` waits until ``health`` answers ok; every process is killed at
fixture teardown (or on ``with`` exit), whatever the test did. Stdlib only, except
:func:`trace_snapshot`, which uses aiohttp.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

_TOML_SCALARS = (bool, int, float, str)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def write_config(path: Path, values: dict[str, Any]) -> Path:
    """Write a flat TOML file (top-level scalars only, as the daemon's config is)."""
    lines = []
    for key, value in values.items():
        if not isinstance(value, _TOML_SCALARS):
            raise TypeError(f"config value for {key!r} must be a TOML scalar, got {value!r}")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = json.dumps(value)  # a JSON string is a valid TOML basic string
        else:
            text = repr(value)
        lines.append(f"{key} = {text}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_to_exit(
    store: Path, config: Path, listen: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run a daemon (noop backend) in the foreground until it exits by itself: for start-ups
    that must be refused. ``timeout`` only guards against one that never exits (the bug)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ramakv_daemon",
            "--noop",
            "--config",
            str(config),
            "--listen",
            listen or f"127.0.0.1:{free_port()}",
            "--store",
            str(store),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO_ROOT),
    )


class DaemonProcess:
    """One daemon subprocess bound to loopback, restartable on the same SQLite file.

    Args:
        workdir: a private directory for the config, log and (by default) the store.
        store: the SQLite file; defaults to ``workdir/sessions.db``.
        config: extra TOML keys for the daemon's config file (e.g. ``debug_enabled``).
        config_path: use this config file as is instead of writing one.
        extra_args: more command-line flags.
        config_flag: pass ``--config``; False leaves the daemon to $RAM_A_KV_CONFIG (set
            it through ``env``) or /etc/ram-a-kv/config.toml.
        env: extra environment variables for the process.
        host: the loopback address to bind.
        noop: pass ``--noop`` (whatever the config says); False leaves the backend to the
            config (``noop_backend``, ``lmcache_url``).

    When the config written here has ``auth_token``, :meth:`post` (and so the health
    polling of :meth:`start` and :meth:`event`) sends it as ``Authorization: Bearer``.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        store: Path | None = None,
        config: dict[str, Any] | None = None,
        config_path: Path | None = None,
        extra_args: list[str] | None = None,
        config_flag: bool = True,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        noop: bool = True,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.store = Path(store) if store else self.workdir / "sessions.db"
        token = (config or {}).get("auth_token") if config_path is None else None
        self.auth_token: str | None = token if isinstance(token, str) else None
        if config_path is None:
            values = {"debug_dir": str(self.workdir / "kvcache_debug"), **(config or {})}
            config_path = write_config(self.workdir / "config.toml", values)
        self.config_path = config_path
        self.extra_args = list(extra_args or [])
        self.config_flag = config_flag
        self.env = dict(env or {})
        self.host = host
        self.noop = noop
        self.port = 0
        self.log_path = self.workdir / "daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # ---- life cycle ----------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (valid once started)."""
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The argv the daemon is started with."""
        return [
            sys.executable,
            "-m",
            "ramakv_daemon",
            *(["--noop"] if self.noop else []),
            "--listen",
            f"{self.host}:{self.port}",
            "--store",
            str(self.store),
            *(["--config", str(self.config_path)] if self.config_flag else []),
            *self.extra_args,
        ]

    def start(self, timeout: float = 20.0) -> DaemonProcess:
        """Start (or restart) the daemon and wait until ``health`` answers ok.

        Keeps the previous port when it is still free, so ``url`` survives a restart.
        Raises:
            RuntimeError: the process exited or did not become healthy in time; the
                message carries the end of its log.
        """
        if self.running():
            raise RuntimeError("daemon already running; stop() or kill() it first")
        for attempt in range(3):
            if not self.port or attempt:
                self.port = free_port(self.host)
            env = {k: v for k, v in os.environ.items() if k != "RAM_A_KV_CONFIG"}
            env.update(self.env)
            with open(self.log_path, "ab") as log:
                log.write(f"---- start #{self.starts + 1}: {' '.join(self.command())}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(
                    self.command(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=str(self.workdir),
                    start_new_session=True,
                )
            self.starts += 1
            if self._wait_healthy(timeout):
                return self
            if self.proc.poll() is None:
                self.kill()
                break
            if "cannot listen" not in self.log():  # not a port race: do not retry
                break
        raise RuntimeError(f"daemon did not become healthy; log tail:\n{self.log()[-3000:]}")

    def _wait_healthy(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                _, body = self.post({"type": "health"}, timeout=1.0)
                if body.get("ok"):
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def running(self) -> bool:
        """True while the process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> int | None:
        """SIGKILL the daemon (no clean shutdown) and reap it; returns its exit code."""
        return self._signal(signal.SIGKILL)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the daemon (clean shutdown), SIGKILL after ``timeout``; returns exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def _signal(self, sig: int, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

    # ---- talking to it ---------------------------------------------------------------
    def post(self, body: Any, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
        """POST ``body`` (JSON-encoded unless bytes) to /event; returns (status, JSON answer).

        Sends the config's ``auth_token`` as a bearer token when there is one.
        """
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.auth_token:
            headers["Authorization"] = f"Bearer {self.auth_token}"
        req = urllib.request.Request(f"{self.url}/event", data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
        """GET ``path`` (e.g. ``/readyz``); returns (status, JSON answer)."""
        headers = {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}
        req = urllib.request.Request(f"{self.url}{path}", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def event(self, type_: str, **fields: Any) -> dict[str, Any]:
        """POST ``{"type": type_, **fields}``; returns the JSON answer."""
        return self.post({"type": type_, **fields})[1]

    def log(self) -> str:
        """Everything the daemon printed so far (all starts)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""


async def trace_snapshot(url: str, session: str | None = None) -> dict[str, Any]:
    """A running daemon's whole state, as protocol 1's snapshot carried it: ``sessions``
    (id -> state, turn_count, chunk_hashes, fork_holds) and ``refcounts``.

    Protocol 2 snapshots carry summaries only, so this reads the admin events: the trace
    snapshot for the ids (and the closed parents of open forks), session_chunks (with
    forks) for each map and fork, chunk_info for every chunk those hold. ``forks``: fork id
    -> its summary with ``chunk_hashes``, as protocol 1 had it.
    """
    import aiohttp

    query = "?protocol=2" + (f"&session={session}" if session else "")
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(f"{url}/trace{query}") as ws:
            header = await ws.receive_json(timeout=120)
            ids: list[str] = []
            while True:
                part = await ws.receive_json(timeout=120)
                ids += [row["session_id"] for row in part["sessions"]]
                # closed parents whose forks are still open: read like sessions
                ids += [
                    f["session_id"] for f in part.get("forks", ()) if f["session_id"] not in ids
                ]
                if part["last"]:
                    break

        async def ask(event: dict[str, Any]) -> dict[str, Any]:
            async with http.post(f"{url}/event", json=event) as r:
                body = await r.json()
            assert body["ok"], body
            return body["data"]

        sessions: dict[str, Any] = {}
        forks: dict[str, Any] = {}
        held: set[str] = set()
        for sid in ids:
            rows: list[dict[str, Any]] = []
            while True:
                page = await ask(
                    {
                        "type": "session_chunks",
                        "session_id": sid,
                        "offset": len(rows),
                        "limit": 1000,
                        "forks": True,
                    }
                )
                rows += page["chunks"]
                if len(rows) >= page["total"]:
                    break
            hashes = [r["hash"] for r in rows]
            forks.update((str(f["fork_id"]), f) for f in page["forks"])
            if page["state"] != "closed":
                sessions[sid] = {
                    "session_id": sid,
                    "state": page["state"],
                    "turn_count": page["turn_count"],
                    "chunk_hashes": hashes,
                    "fork_holds": page["fork_holds"],
                    "forks": page["forks"],
                }
            if page["state"] == "active":
                held.update(hashes)
            for hold in page["fork_holds"]:
                held.update(hold)
        refcounts: dict[str, int] = {}
        every = sorted(held)
        for i in range(0, len(every), 1000):
            info = await ask({"type": "chunk_info", "chunk_hashes": every[i : i + 1000]})
            refcounts.update((h, c["refcount"]) for h, c in info["chunks"].items() if c["refcount"])
    return {
        "kind": "snapshot",
        "seq": header["seq"],
        "sessions": sessions,
        "refcounts": refcounts,
        "forks": forks,
    }


@pytest.fixture
def daemon_proc_factory(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    """Build and start daemons (kwargs as :class:`DaemonProcess`); all killed at teardown."""
    made: list[DaemonProcess] = []

    def make(*, start: bool = True, **kwargs: Any) -> DaemonProcess:
        d = DaemonProcess(tmp_path / f"daemon{len(made)}", **kwargs)
        made.append(d)
        return d.start() if start else d

    yield make
    for d in made:
        d.kill()


@pytest.fixture
def daemon_proc(daemon_proc_factory: Callable[..., DaemonProcess]) -> DaemonProcess:
    """One started, healthy daemon (noop backend, temp SQLite file), killed at teardown."""
    return daemon_proc_factory()
