"""The idle policies through a real daemon process on its real SQLite file: sessions whose
idle clock (the stored last_event_ts, set back in the file, never waited for) ran out while
the daemon was stopped are suspended or closed at start-up, and that survives kill -9."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

from support.daemon_proc import DaemonProcess
from support.reliability import wait_for

HANG_GUARD_S = 120.0  # a hang guard, not a timing bound: the wait ends on the condition


def states(d: DaemonProcess) -> dict[str, str]:
    rows = d.event("list_sessions")["data"]["sessions"]
    return {r["session_id"]: r["state"] for r in rows}


def wait_for_states(d: DaemonProcess, want: dict[str, str]) -> dict[str, str]:
    wait_for(lambda: states(d) == want, timeout=HANG_GUARD_S)
    return states(d)


def test_idle_clocks_that_ran_out_while_stopped_act_at_start(
    daemon_proc_factory: Callable[..., DaemonProcess],
) -> None:
    d = daemon_proc_factory(config={"idle_suspend_s": 3600, "idle_close_s": 86400})
    for sid in ("p", "q", "r"):
        d.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": [sid, "sys"]})
    d.stop()
    now = time.time()
    con = sqlite3.connect(d.store)
    with con:  # as if p had been idle two hours and q more than a day
        con.execute(
            "UPDATE session_state SET last_event_ts = ? WHERE session_id='p'", (now - 7200,)
        )
        con.execute("UPDATE session_state SET last_event_ts = ? WHERE session_id='q'", (now - 9e4,))
    con.close()

    d.start()
    want = {"p": "suspended", "r": "active"}
    assert wait_for_states(d, want) == want
    chunks = d.event("chunk_info", chunk_hashes=["p", "q", "r", "sys"])["data"]["chunks"]
    assert {h: c["refcount"] for h, c in chunks.items()} == {"p": 0, "q": 0, "r": 1, "sys": 1}
    log = d.log()
    assert "idle policies: 1 sessions suspended, 1 closed, 0 failed" in log, log
    d.kill()  # the sweep's events were committed before it logged them: they stay

    d.start()
    assert states(d) == want
    con = sqlite3.connect(d.store)
    (ts,) = con.execute("SELECT last_event_ts FROM session_state WHERE session_id='p'").fetchone()
    con.close()
    assert abs(ts - (now - 7200)) < 1e-3  # the idle suspend kept p's clock
