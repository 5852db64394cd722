"""The console keeps up with 10,000 sessions and bursts of trace events (no timing asserts:
bench/console_scale.py measures; here the result must be right and keys must land)."""

from __future__ import annotations

from typing import Any

from support.console_rig import FIXED_NOW, FakeLink, until

from ramakv_console.widgets.session_table import SessionTable

N = 10_000


def summary(i: int, turns: int = 1, chunks: int = 2) -> dict[str, Any]:
    return {
        "session_id": f"s{i:05d}",
        "state": "active",
        "turn_count": turns,
        "chunk_count": chunks,
        "shared_count": 1,
        "fork_holds": 0,
        "last_event_ts": FIXED_NOW,
    }


def big_snapshot() -> list[dict[str, Any]]:
    rows = [summary(i) for i in range(N)]
    parts = [rows[i : i + 1500] for i in range(0, N, 1500)]
    return [
        {
            "kind": "snapshot",
            "protocol": 2,
            "seq": 1,
            "epoch": "e",
            "totals": {"sessions": N, "chunks": N + 1, "references": 2 * N},
        },
        *(
            {
                "kind": "snapshot_sessions",
                "seq": 1,
                "epoch": "e",
                "part": k,
                "last": k == len(parts) - 1,
                "refcounts": {},
                "sessions": p,
            }
            for k, p in enumerate(parts)
        ),
    ]


def burst(count: int) -> list[dict[str, Any]]:
    out = []
    for j in range(count):
        i = j % N
        out.append(
            {
                "kind": "event",
                "seq": 2 + j,
                "ts": FIXED_NOW,
                "type": "turn_end",
                "session_id": f"s{i:05d}",
                "ok": True,
                "data": {},
                "delta": {"sessions": {f"s{i:05d}": summary(i, 2, 3)}, "refcounts": {f"n{j}": 1}},
                "totals": {"sessions": N, "chunks": N + 2 + j, "references": 2 * N + j},
            }
        )
    return out


async def test_ten_thousand_sessions_and_a_burst(fake_app: Any) -> None:
    app = fake_app(link=FakeLink([*big_snapshot(), *burst(3000)]))
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one(SessionTable)
        await until(
            pilot,
            lambda: table.row_count == N and app.state.seq == 3001,
            timeout=60,
            what="10k rows and the burst",
        )
        assert table.get_row("s00007")[3] == 3 and table.get_row("s09999")[3] == 2
        assert app.state.chunk_total() == N + 3001
        await pilot.press("down", "down", "down")
        await until(pilot, lambda: table.cursor_row == 3, what="three rows down")
        await pilot.press("o", "o")  # sort by turns: the 3,000 touched sessions first
        await until(pilot, lambda: table.sort_key == "turns")
        assert table.get_row_index("s02999") < 3000 <= table.get_row_index("s03000")
        await pilot.press("end")
        await until(pilot, lambda: table.cursor_row == N - 1, what="the last row")
