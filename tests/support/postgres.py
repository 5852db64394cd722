"""A real PostgreSQL server for tests: a fresh cluster in a temp dir on a free loopback port.

``initdb``/``pg_ctl`` refuse to run as root, so as root they run as the ``postgres`` system
user (created by the Debian package) through ``runuser``. The server trusts loopback
connections (a throw-away cluster; nothing else listens on its port), keeps its socket in
its own directory, and is stopped at the end of the test session. ``.ci/run`` and the
Makefile install PostgreSQL when ``pg_ctl`` is missing; where it still cannot be found the
tests that need it skip, naming why.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.daemon_proc import free_port

SERVER_USER = "postgres"
START_TIMEOUT_S = 120.0


def find_bindir() -> Path | None:
    """The directory holding pg_ctl: $PG_BINDIR, PATH, or the newest Debian install."""
    env = os.environ.get("PG_BINDIR")
    if env and (Path(env) / "pg_ctl").exists():
        return Path(env)
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent  # Debian links pg_ctl alone into PATH
    installs = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(installs[-1]).parent if installs else None


class PostgresServer:
    """One throw-away cluster: ``start``/``stop``/``restart``, ``url(db)`` to reach it."""

    def __init__(self, bindir: Path, root: Path | None = None) -> None:
        self.bindir = bindir
        self.root = Path(root or tempfile.mkdtemp(prefix="ramakv-pg-"))
        self.data = self.root / "data"
        self.log_path = self.root / "server.log"
        self.port = free_port()
        self.as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        self._databases = 0

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / argv[0]), *argv[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=300)

    def init(self) -> None:
        """initdb a fresh cluster (owned by the server user when we are root)."""
        if self.as_root:
            shutil.chown(self.root, SERVER_USER, SERVER_USER)
        self.root.chmod(0o700)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        )

    def start(self) -> None:
        """Start on ``port`` (loopback only) and wait until it accepts connections."""
        opts = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.root} -c fsync=on -c max_connections=200"
        )
        done = self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-o",
            opts,
            "-w",
            "-t",
            str(int(START_TIMEOUT_S)),
            "start",
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stdout}{done.stderr}\n{self.log()}")
        self.wait_ready()

    def wait_ready(self) -> None:
        """Until pg_isready says the server accepts connections (or the time is up)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            ready = subprocess.run(
                [str(self.bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
                text=True,
            )
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL not ready after {START_TIMEOUT_S}s\n{self.log()}")
            time.sleep(0.05)  # polling a condition, not waiting for time

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash: no checkpoint, recovery on start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh empty database; its URL."""
        self._databases += 1
        name = f"t{os.getpid()}_{self._databases}"
        subprocess.run(
            [
                str(self.bindir / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-qc",
                f"CREATE DATABASE {name}",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return self.url(name)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def start_server() -> PostgresServer:
    """A started throw-away server, or pytest.skip naming why there cannot be one."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL is not installed (no pg_ctl; `.ci/run` installs it with "
            "apt-get install postgresql)"
        )
    server = PostgresServer(bindir)
    try:
        server.init()
        server.start()
    except BaseException:
        server.destroy()
        raise
    return server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One server for the whole test session, stopped and removed at its end."""
    server = start_server()
    try:
        yield server
    finally:
        server.destroy()
