"""The session table's shared column is current: the first holder of a shared chunk too."""

from __future__ import annotations

from typing import Any

from support.console_rig import until

from ramakv_console.widgets.session_table import SessionTable

SIZE = (140, 40)


def turn_end(sid: str, hashes: list[str]) -> dict[str, Any]:
    return {"type": "turn_end", "session_id": sid, "kv_transfer_params": {"chunk_hashes": hashes}}


def shown_shared(table: SessionTable, sid: str) -> str:
    cell = table.get_row(sid)[4]
    return cell if isinstance(cell, str) else cell.plain


async def test_first_holder_of_a_system_chunk_shows_it_shared(
    real_app: Any, daemon_proc: Any
) -> None:
    """agent-1 comes first with the sys chunk; agent-2..12 join while the console
    watches: agent-1 (no event of its own since) shows 1, like the Refcounts view's 12."""
    daemon_proc.post(turn_end("agent-1", ["sys", "own-1"]))
    app = real_app()
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(SessionTable)
        await until(pilot, lambda: table.row_count == 1, what="agent-1's row")
        assert shown_shared(table, "agent-1") == "0"  # nobody else holds sys yet
        for i in range(2, 13):
            daemon_proc.post(turn_end(f"agent-{i}", ["sys", f"own-{i}"]))
        await until(pilot, lambda: table.row_count == 12, what="12 rows")
        await until(
            pilot, lambda: shown_shared(table, "agent-1") == "1", what="agent-1 shows shared 1"
        )
        assert all(shown_shared(table, f"agent-{i}") == "1" for i in range(1, 13))
        # The last other holder leaves: agent-1's count drops back without an event of its own.
        for i in range(2, 13):
            daemon_proc.post({"type": "session_close", "session_id": f"agent-{i}"})
        await until(pilot, lambda: table.row_count == 1, what="agent-1 alone")
        await until(pilot, lambda: shown_shared(table, "agent-1") == "0", what="shared 0")
    # A console that connects now reads the same from the snapshot.
    for i in range(2, 13):
        daemon_proc.post(turn_end(f"agent-{i}", ["sys", f"own-{i}"]))
    app = real_app()
    async with app.run_test(size=SIZE) as pilot:
        table = app.screen.query_one(SessionTable)
        await until(pilot, lambda: table.row_count == 12, what="12 rows")
        assert shown_shared(table, "agent-1") == "1"
