"""One page of the daemon's chunks by refcount (chunk_top); rows can be marked for eviction."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from ramakv_console.context import Sender

MARK = "●"
PAGE = 200


class RefcountTable(DataTable[Any]):
    """The page the daemon answered: highest refcount first, then hash; space marks a row.

    The daemon pages and searches (the console never holds every chunk); refcount changes
    from the trace update the rows shown, and the page is fetched again now and then.
    """

    DEFAULT_CSS = "RefcountTable { height: 1fr; }"

    def __init__(self, send: Sender, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.send = send
        self.find_text = ""
        self.page_offset = 0
        self.total = 0
        self.total_exact = True
        self.marked: set[str] = set()
        self.counts: dict[str, int] = {}
        self.loaded = False
        self.error = ""

    def on_mount(self) -> None:
        self.add_column(" ", key="mark", width=1)
        self.add_column("chunk hash", key="hash", width=40)
        self.add_column("refcount", key="refcount", width=8)

    async def load(self) -> None:
        """Ask the daemon for the current page (chunk_top with the find text as prefix)."""
        send = self.send
        event: dict[str, Any] = {"type": "chunk_top", "limit": PAGE, "offset": self.page_offset}
        if self.find_text:
            event["prefix"] = self.find_text
        env = await send(event, quiet=True)
        if not env.get("ok"):
            self.error = str(env.get("error"))
            self.loaded = True
            return
        data = env.get("data") or {}
        self.error = ""
        self.total = int(data.get("total") or 0)
        self.total_exact = bool(data.get("total_exact", True))
        current = self.current_hash()
        self.clear()
        self.counts = {}
        for row in data.get("chunks") or []:
            h, n = str(row["hash"]), int(row["refcount"])
            self.counts[h] = n
            self.add_row(MARK if h in self.marked else " ", h, str(n), key=h)
        self.loaded = True
        if current in self.counts:
            self.move_cursor(row=self.get_row_index(current))

    def apply_refcounts(self, counts: dict[str, int]) -> None:
        """New counts from the trace for the rows shown (order is fixed until the next
        fetch)."""
        for h, n in counts.items():
            if h in self.counts and self.counts[h] != n:
                self.counts[h] = n
                self.update_cell(h, "refcount", str(n) if n else "0 (gone)")

    def current_hash(self) -> str | None:
        """The chunk under the cursor."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def toggle_mark(self) -> None:
        """Mark or unmark the chunk under the cursor."""
        h = self.current_hash()
        if h is None:
            return
        self.marked.symmetric_difference_update({h})
        self.update_cell(h, "mark", MARK if h in self.marked else " ")

    def targets(self) -> list[str]:
        """Marked chunks, else the one under the cursor."""
        if self.marked:
            return sorted(self.marked)
        h = self.current_hash()
        return [h] if h else []
