"""The console stays responsive with 10,000 sessions and bursts of trace events."""

from __future__ import annotations

import time
from typing import Any

from conftest import FIXED_NOW, FakeLink, until

from ramakv_console.widgets.session_table import SessionTable

N = 10_000


def big_snapshot() -> dict[str, Any]:
    sessions = {
        f"s{i:05d}": {"session_id": f"s{i:05d}", "state": "active", "turn_count": 1,
                      "chunk_hashes": ["sys", f"h{i}"], "fork_holds": [],
                      "last_event_ts": FIXED_NOW}
        for i in range(N)
    }
    refcounts = {"sys": N, **{f"h{i}": 1 for i in range(N)}}
    return {"kind": "snapshot", "seq": 1, "sessions": sessions, "refcounts": refcounts}


def burst(count: int) -> list[dict[str, Any]]:
    out = []
    for j in range(count):
        sid = f"s{j % N:05d}"
        out.append({"kind": "event", "seq": 2 + j, "ts": FIXED_NOW, "type": "turn_end",
                    "session_id": sid, "ok": True, "data": {},
                    "delta": {"sessions": {sid: {
                        "session_id": sid, "state": "active", "turn_count": 2,
                        "chunk_hashes": ["sys", f"h{j % N}", f"n{j}"], "fork_holds": [],
                        "last_event_ts": FIXED_NOW}}, "refcounts": {f"n{j}": 1}}})
    return out


async def test_ten_thousand_sessions_and_a_burst(fake_app: Any) -> None:
    app = fake_app(link=FakeLink([big_snapshot(), *burst(3000)]))
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one(SessionTable)
        await until(pilot, lambda: table.row_count == N and app.state.seq == 3001,
                    timeout=60, what="10k rows and the burst")
        assert table.get_row("s00007")[3] == 3
        t0 = time.monotonic()
        await pilot.press("down", "down", "down")  # the UI still answers keys promptly
        assert time.monotonic() - t0 < 5.0
        assert table.cursor_row == 3
