"""One session's ordered chunk map with refcounts, loaded on demand from the daemon."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from ramakv_console.context import Sender

PAGE = 500


def others_text(others: list[str], limit: int = 4) -> str:
    """'a, b, c +2' for a holder list."""
    shown = ", ".join(others[:limit])
    return f"{shown} +{len(others) - limit}" if len(others) > limit else shown


class ChunkMapTable(DataTable[Any]):
    """Rows in map order; chunks other sessions also hold are highlighted.

    The map comes from ``session_chunks`` pages (the trace sends no maps); refcount
    changes from the trace update the rows shown.
    """

    DEFAULT_CSS = "ChunkMapTable { height: 2fr; }"

    def __init__(self, session_id: str, send: Sender, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.session_id = session_id
        self.send = send
        self.hashes: list[str] = []
        self.others: dict[str, int] = {}
        self.total = 0
        self.loaded = False
        self.error = ""

    def on_mount(self) -> None:
        self.add_column("#", key="pos", width=5)
        self.add_column("chunk hash", key="hash", width=34)
        self.add_column("refcount", key="refcount", width=8)
        self.add_column("held by others", key="others", width=14)

    async def load(self) -> None:
        """Fetch the whole map, page by page, and redraw."""
        send = self.send
        rows: list[dict[str, Any]] = []
        while True:
            env = await send(
                {
                    "type": "session_chunks",
                    "session_id": self.session_id,
                    "offset": len(rows),
                    "limit": PAGE,
                },
                quiet=True,
            )
            if not env.get("ok"):
                self.error = str(env.get("error"))
                self.loaded = True
                self.clear()
                return
            data = env.get("data") or {}
            rows += data.get("chunks") or []
            self.total = int(data.get("total") or 0)
            if len(rows) >= self.total or not data.get("chunks"):
                break
        cursor = self.cursor_row
        self.clear()
        self.hashes = [str(r["hash"]) for r in rows]
        self.others = {}
        for r in rows:
            h, n, others = str(r["hash"]), int(r["refcount"]), int(r["others"])
            self.others[h] = others
            style = "bold cyan" if others else ""
            self.add_row(
                str(r["pos"]),
                Text(h, style=style),
                str(n),
                Text(str(others) if others else "-", style=style),
                key=f"{r['pos']}:{h}",
            )
        self.error = ""
        self.loaded = True
        if self.row_count:
            self.move_cursor(row=min(cursor, self.row_count - 1))

    def apply_refcounts(self, counts: dict[str, int]) -> None:
        """New refcounts from the trace for the chunks shown (others = count - own)."""
        if not self.hashes:
            return
        mine = set(self.hashes)
        for h, n in counts.items():
            if h not in mine:
                continue
            for i, x in enumerate(self.hashes):
                if x == h:
                    self.update_cell(f"{i}:{h}", "refcount", str(n))
