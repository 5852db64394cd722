"""The console under a stream of events (issue 27 item 2): what it shows stays right while
its work is bounded (bench/console_scale.py measures the time; nothing here does).

A PushLink lets each test hand the console more records while it runs; every wait is for
a condition.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from support.console_rig import FIXED_NOW, FakeLink, until

from ramakv_console.screens.trace import TraceScreen
from ramakv_console.widgets.session_table import SessionTable
from ramakv_console.widgets.stats_header import StatsHeader
from ramakv_console.widgets.trace_log import MAX_LINES, PER_WRITE, TraceLog

SIZE = (120, 32)
N = 2000  # sessions


class PushLink(FakeLink):
    """A FakeLink whose trace also yields whatever the test pushes later."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        super().__init__(records)
        self.more: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def push(self, records: list[dict[str, Any]]) -> None:
        for rec in records:
            self.more.put_nowait(rec)

    async def trace(self) -> AsyncIterator[dict[str, Any]]:
        yield {"kind": "_status", "connected": True, "detail": "connected"}
        for rec in self.records:
            yield rec
        while True:
            yield await self.more.get()


def summary(i: int, turns: int = 1) -> dict[str, Any]:
    return {
        "session_id": f"s{i:04d}",
        "state": "active",
        "turn_count": turns,
        "chunk_count": 4,
        "shared_count": 1,
        "fork_holds": 0,
        "last_event_ts": FIXED_NOW,
    }


def snapshot(n: int = N) -> list[dict[str, Any]]:
    return [
        {
            "kind": "snapshot",
            "protocol": 2,
            "seq": 1,
            "epoch": "e",
            "totals": {"sessions": n, "chunks": n, "references": 4 * n},
        },
        {
            "kind": "snapshot_sessions",
            "seq": 1,
            "epoch": "e",
            "part": 0,
            "last": True,
            "refcounts": {},
            "sessions": [summary(i) for i in range(n)],
        },
    ]


def events(first_seq: int, count: int, turns: int = 2, new: int = 0) -> list[dict[str, Any]]:
    """turn_ends for sessions 0, 1, ... (``new`` > 0: that many sessions past N first)."""
    out = []
    for j in range(count):
        i = N + j if j < new else j % N
        out.append(
            {
                "kind": "event",
                "seq": first_seq + j,
                "ts": FIXED_NOW,
                "type": "turn_end",
                "session_id": f"s{i:04d}",
                "ok": True,
                "data": {"evicted_count": 1},
                "delta": {"sessions": {f"s{i:04d}": summary(i, turns)}, "refcounts": {}},
                "totals": {"sessions": N + new, "chunks": N, "references": 4 * N},
            }
        )
    return out


def shown_text(log: TraceLog) -> list[str]:
    """The log's lines as plain text."""
    return [strip.text for strip in log.lines]


async def test_the_header_and_the_table_follow_a_burst(fake_app: Any) -> None:
    link = PushLink(snapshot())
    app = fake_app(link=link)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(SessionTable)
        await until(pilot, lambda: table.row_count == N, what="the snapshot")
        link.push(events(2, 3000))
        header = app.screen.query_one(StatsHeader)
        await until(pilot, lambda: "seq 3001" in str(header.render()), what="the last seq")
        assert table.get_row("s0000")[2] == 2 and table.get_row(f"s{N - 1:04d}")[2] == 2


async def test_the_table_keeps_up_while_another_view_shows(fake_app: Any) -> None:
    """Rows change and new sessions arrive while the Trace view shows; back on Sessions
    the table is right at once (it kept its index, it does not rebuild every row)."""
    link = PushLink(snapshot())
    app = fake_app(link=link)
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(SessionTable)
        await until(pilot, lambda: table.row_count == N, what="the snapshot")
        await pilot.press("o", "o")  # sort by turns: changed sessions move to the top
        await until(pilot, lambda: table.sort_key == "turns")
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, TraceScreen), what="trace view")
        link.push(events(2, 5, turns=9, new=2))
        await until(pilot, lambda: app.state.seq == 6, what="the events applied")
        assert table.row_count == N + 2  # applied while hidden
        await pilot.press("1")
        await until(pilot, lambda: app.screen.query_one(SessionTable) is table)
        order = [table.index[k][1] for k in range(5)]
        assert sorted(order) == sorted([f"s{N:04d}", f"s{N + 1:04d}", "s0002", "s0003", "s0004"])
        assert table.get_row(f"s{N + 1:04d}")[2] == 9


async def test_the_trace_log_under_a_burst(fake_app: Any) -> None:
    """Shown, the log is filled from the history (full, newest last); under a burst it
    writes the newest lines and says how many it left out, keeps at most MAX_LINES and
    follows the end, unless scrolled back."""
    link = PushLink(snapshot())
    app = fake_app(link=link)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.state.sessions) == N, what="the snapshot")
        for k in range(3):  # a batch keeps its newest 500 for the logs: 1,500 kept
            link.push(events(2 + 1000 * k, 1000))
            await until(pilot, lambda k=k: app.state.seq == 1001 + 1000 * k, what="a burst")
        await pilot.press("3")
        await until(pilot, lambda: isinstance(app.screen, TraceScreen), what="trace view")
        log = app.screen.query_one(TraceLog)
        await until(pilot, lambda: len(log.lines) == MAX_LINES, what="filled from the history")
        assert shown_text(log)[-1].lstrip().startswith("3001 ")
        link.push(events(3002, 3000))
        await until(
            pilot,
            lambda: shown_text(log)[-1].lstrip().startswith("6001 "),
            what="the newest event in the log",
        )
        lines = shown_text(log)
        assert any("more events" in line for line in lines)  # the burst was cut, and said
        assert len(lines) == MAX_LINES
        await until(pilot, lambda: log.scroll_offset.y == log.max_scroll_y, what="at the end")
        # Scrolled back, new lines do not pull the view to the end.
        log.scroll_home(animate=False, immediate=True)
        await until(pilot, lambda: log.scroll_offset.y == 0, what="scrolled back")
        link.push(events(6002, PER_WRITE))
        await until(
            pilot,
            lambda: shown_text(log)[-1].lstrip().startswith(f"{6001 + PER_WRITE} "),
            what="the new lines written",
        )
        assert log.scroll_offset.y == 0
