"""Forks through a real daemon process: fork ids and holds survive kill -9, a closed
parent's holds stay, and a hold aged past fork_hold_ttl_s while the daemon was down is
released at start-up (its age set in the real SQLite file, never waited for)."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable

from support.daemon_proc import DaemonProcess, trace_snapshot


def refcount(d: DaemonProcess, h: str) -> int:
    return int(d.event("chunk_info", chunk_hashes=[h])["data"]["chunks"][h]["refcount"])


async def test_fork_ids_and_holds_survive_kill9(
    daemon_proc_factory: Callable[..., DaemonProcess],
) -> None:
    d = daemon_proc_factory()
    d.event("turn_end", session_id="p", kv_transfer_params={"chunk_hashes": ["a", "b"]})
    first = d.event("session_fork", session_id="p")["data"]["fork_id"]
    d.event("turn_end", session_id="p", kv_transfer_params={"chunk_hashes": ["c"]})
    second = d.event("session_fork", session_id="p")["data"]["fork_id"]
    assert d.event("session_fork_end", session_id="p", fork_id=second)["data"]["fork_end"]
    d.event("session_close", session_id="p")  # acknowledged: the first fork stays held
    d.kill()

    d.start()
    assert refcount(d, "a") == 1 and refcount(d, "b") == 1 and refcount(d, "c") == 0
    rows = d.event("list_sessions", state="closed")["data"]["sessions"]
    assert [(r["session_id"], [f["fork_id"] for f in r["forks"]]) for r in rows] == [("p", [first])]
    snap = await trace_snapshot(d.url)
    assert snap["forks"][str(first)]["chunk_hashes"] == ["a", "b"]
    # The counter survived too: no id is given twice, not even the ended newest one's.
    d.event("turn_end", session_id="q", kv_transfer_params={"chunk_hashes": ["x"]})
    assert d.event("session_fork", session_id="q")["data"]["fork_id"] == second + 1
    assert d.event("session_fork_end", session_id="p", fork_id=second)["data"] == {
        "fork_end": False,
        "fork_id": second,
    }
    assert d.event("session_fork_end", session_id="p", fork_id=first)["data"]["fork_end"]
    assert refcount(d, "a") == 0


def test_a_hold_that_aged_past_the_ttl_while_stopped_is_released_at_start(
    daemon_proc_factory: Callable[..., DaemonProcess],
) -> None:
    d = daemon_proc_factory(config={"fork_hold_ttl_s": 3600})
    d.event("turn_end", session_id="p", kv_transfer_params={"chunk_hashes": ["a"]})
    old = d.event("session_fork", session_id="p")["data"]["fork_id"]
    young = d.event("session_fork", session_id="p")["data"]["fork_id"]
    d.event("session_close", session_id="p")
    d.stop()
    con = sqlite3.connect(d.store)
    with con:  # as if the first fork had been taken two hours ago
        con.execute("UPDATE forks SET created_ts = ? WHERE fork_id = ?", (time.time() - 7200, old))
    con.close()

    d.start()
    rows = d.event("list_sessions")["data"]["sessions"]
    assert [f["fork_id"] for f in rows[0]["forks"]] == [young]
    assert refcount(d, "a") == 1
    log = d.log()
    assert re.search(rf"fork hold expired: session=p fork_id={old} age=72\d\ds", log), log
    assert "WARNING" in next(line for line in log.splitlines() if "fork hold expired" in line)
