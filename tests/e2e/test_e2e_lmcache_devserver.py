"""End to end: the daemon process steers the ascend_ext devserver process (real CPU LMCache).

The host's view: a prompt goes through the engine (/engine/turn) and comes back with
chunk_hashes; the host reports them to the daemon; the daemon's evictions, demotions and
prefetches show up in the engine's tiers (/memory/query).
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

CPU, DISK = "LocalCPUBackend", "LocalDiskBackend"


def _post(url: str, body: dict[str, Any], timeout: float = 30.0) -> Any:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _where(devserver: str, hashes: list[str], want: list[str], timeout: float = 120.0) -> dict:
    """/memory/query until every hash sits exactly in `want` (the daemon delivers its backend
    calls after answering the event, and disk writes are asynchronous); the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        got = _post(devserver + "/memory/query", {"chunk_hashes": hashes})
        if all(got[h] == want for h in hashes) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _ok(daemon: Any, type_: str, **fields: Any) -> dict[str, Any]:
    answer = daemon.event(type_, **fields)
    assert answer["ok"], (answer, daemon.log()[-2000:])
    return answer["data"]


def test_daemon_steers_the_devserver_through_a_session(steering_daemon, devserver_url) -> None:
    daemon, dev = steering_daemon, devserver_url

    # The engine serves a 4-chunk prompt and hands its chunk hashes to the host.
    turn = _post(dev + "/engine/turn", {"token_ids": list(range(1, 1 + 4 * 16))})
    assert turn["served"] == ["computed"] * 4
    hashes = turn["kv_transfer_params"]["chunk_hashes"]
    assert len(set(hashes)) == 4
    assert _where(dev, hashes, [CPU, DISK]) == {h: [CPU, DISK] for h in hashes}

    # turn_end with them: the daemon now holds a reference on each.
    data = _ok(daemon, "turn_end", session_id="s1", kv_transfer_params=turn["kv_transfer_params"])
    assert data["evicted_count"] == 0 and data["map_updated"]
    # The next turn_end drops the last two: no other session holds them -> gone everywhere.
    kept, dropped = hashes[:2], hashes[2:]
    data = _ok(daemon, "turn_end", session_id="s1", kv_transfer_params={"chunk_hashes": kept})
    assert data["evicted_count"] == 2
    assert _where(dev, dropped, []) == {h: [] for h in dropped}
    assert _where(dev, kept, [CPU, DISK]) == {h: [CPU, DISK] for h in kept}

    # Suspend demotes (out of DDR, kept on disk) ...
    data = _ok(daemon, "session_suspend", session_id="s1")
    assert data["suspended"] and data["evicted_count"] == 2
    assert _where(dev, kept, [DISK]) == {h: [DISK] for h in kept}
    # ... and snapshot_restore prefetches them back into DDR.
    data = _ok(daemon, "snapshot_restore", session_id="s1")
    assert data["prefetch_sent"] and data["prefetch_count"] == 2
    assert _where(dev, kept, [CPU, DISK]) == {h: [CPU, DISK] for h in kept}

    # The engine sees it too: the kept prefix is served from DDR, the dropped chunks recomputed.
    again = _post(dev + "/engine/turn", {"token_ids": list(range(1, 1 + 4 * 16))})
    assert again["kv_transfer_params"]["chunk_hashes"] == hashes
    assert again["served"] == ["ddr", "ddr", "computed", "computed"]
    assert again["bytes_ok"]
