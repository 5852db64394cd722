"""PostgreSQL down, restarting and crashing under a real daemon: changes answer 503 while it
is away, reads go on from memory, the daemon comes back by itself, nothing acknowledged is
lost."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.burst import read_acks
from support.daemon_proc import DaemonProcess
from support.postgres import PostgresServer, start_server
from test_pg_kill9 import check_acked_are_stored, run_burst_until, stored_sessions


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A server of this test's own: it is stopped and crashed mid-test."""
    server = start_server()
    try:
        yield server
    finally:
        server.destroy()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def turn_end(d: DaemonProcess, sid: str, hashes: list[str]) -> tuple[int, dict]:
    return d.post(
        {"type": "turn_end", "session_id": sid, "kv_transfer_params": {"chunk_hashes": hashes}}
    )


def test_postgres_down_changes_503_reads_go_on_and_it_comes_back(
    daemon_proc_factory: Callable[..., DaemonProcess],
    own_server: PostgresServer,
) -> None:
    d = daemon_proc_factory(
        config={"session_store_url": own_server.create_database(), "node_id": "a"}
    )
    assert turn_end(d, "s", ["h1", "h2"])[1]["ok"]
    own_server.stop()

    status, body = turn_end(d, "s", ["h1", "h2", "h3"])
    assert status == 503 and body["ok"] is False, body
    assert d.event("session_map", session_id="s")["data"]["chunk_hashes"] == ["h1", "h2"]
    status, ready = get(d.url + "/readyz")
    assert status == 503 and not json.loads(ready)["checks"]["store"]["ok"], ready
    wait_for(
        lambda: "ramakv_store_connected 0.0" in get(d.url + "/metrics")[1],
        "/metrics to say the store is gone",
    )

    own_server.start()  # same port: the daemon reconnects by itself
    wait_for(lambda: turn_end(d, "s", ["h1", "h2", "h3"])[0] == 200, "writes to work again")
    assert d.event("session_map", session_id="s")["data"]["chunk_hashes"] == ["h1", "h2", "h3"]
    wait_for(lambda: get(d.url + "/readyz")[0] == 200, "/readyz to pass again")
    metrics = get(d.url + "/metrics")[1]
    assert "ramakv_store_connected 1.0" in metrics
    assert "ramakv_store_reconnects_total 0.0" not in metrics  # the LISTEN connection came back
    assert "ramakv_store_reconnects_total" in metrics


async def test_a_postgres_crash_mid_load_loses_nothing_acknowledged(
    daemon_proc_factory: Callable[..., DaemonProcess],
    own_server: PostgresServer,
    tmp_path: Path,
) -> None:
    url = own_server.create_database()
    d = daemon_proc_factory(config={"session_store_url": url, "node_id": "a"})
    # Crash (immediate: no checkpoint, WAL recovery at start) once 150 turns were answered.
    stats = run_burst_until(d, tmp_path / "acks.txt", 150, lambda: own_server.stop("immediate"))
    acked = read_acks(tmp_path / "acks.txt")
    assert sum(acked.values()) == stats["acked"] >= 150
    own_server.start()
    check_acked_are_stored(acked, await stored_sessions(url, "a"))
    # The daemon is still serving, and writes once the server is back.
    wait_for(lambda: turn_end(d, "after", ["x"])[0] == 200, "writes to work again")
