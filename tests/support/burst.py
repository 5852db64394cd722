"""Drive burst_client.py against a daemon and read back what it acknowledged."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from support import burst_client


def count_lines(path: Path) -> int:
    """Lines written so far (0 before the file exists)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def run_burst_until(
    url: str, acks_path: Path, acks: int, then: Callable[[], None], sessions: int, turns: int
) -> dict[str, int]:
    """Start the burst client, call ``then`` once ``acks`` answers came, return its stats."""
    client = subprocess.Popen(
        [
            sys.executable,
            burst_client.__file__,
            url,
            str(acks_path),
            "--sessions",
            str(sessions),
            "--turns",
            str(turns),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120  # a hang guard: a loaded machine is slow
        while count_lines(acks_path) < acks:
            assert client.poll() is None, client.communicate()
            assert time.monotonic() < deadline, "burst too slow to reach the kill point"
            time.sleep(0.01)
        then()
        out, _ = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    return json.loads(out.strip().splitlines()[-1])


def read_acks(path: Path) -> dict[str, int]:
    """Each session's last acknowledged turn, checking that its acks came in order."""
    acked: dict[str, int] = {}
    for line in path.read_text().splitlines():
        sid, turn = line.split()
        assert int(turn) == acked.get(sid, 0) + 1  # each session's acks are in order
        acked[sid] = int(turn)
    return acked
