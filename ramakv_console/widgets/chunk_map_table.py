"""One session's ordered chunk map with global refcounts and the other sessions sharing."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from ramakv_console.state import ConsoleState


def others_text(others: list[str], limit: int = 4) -> str:
    """'a, b, c +2' for a holder list."""
    shown = ", ".join(others[:limit])
    return f"{shown} +{len(others) - limit}" if len(others) > limit else shown


class ChunkMapTable(DataTable[Any]):
    """Rows in map order; chunks other sessions also hold are highlighted."""

    DEFAULT_CSS = "ChunkMapTable { height: 2fr; }"

    def __init__(self, session_id: str, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.session_id = session_id

    def on_mount(self) -> None:
        self.add_column("#", key="pos")
        self.add_column("chunk hash", key="hash")
        self.add_column("refcount", key="refcount")
        self.add_column("also held by", key="others")
        self.rebuild()

    def rebuild(self) -> None:
        """Redraw from the app's state."""
        state: ConsoleState = self.app.state  # type: ignore[attr-defined]
        row = self.cursor_row
        self.clear()
        s = state.sessions.get(self.session_id)
        if s is None:
            return
        for i, h in enumerate(s.chunk_hashes):
            others = sorted(state.holders.get(h, set()) - {self.session_id})
            style = "bold cyan" if others else ""
            self.add_row(
                str(i), Text(h, style=style), str(state.refcounts.get(h, 0)),
                Text(others_text(others), style=style), key=f"{i}:{h}",
            )
        if self.row_count:
            self.move_cursor(row=min(row, self.row_count - 1))
