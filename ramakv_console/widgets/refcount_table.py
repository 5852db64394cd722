"""Every referenced chunk with its refcount and holders; rows can be marked for eviction."""

from __future__ import annotations

from typing import Any

from textual.widgets import DataTable

from ramakv_console.state import Changes, ConsoleState
from ramakv_console.widgets.chunk_map_table import others_text

MARK = "●"


class RefcountTable(DataTable[Any]):
    """Chunks matching the find text, highest refcount first; space marks a row."""

    DEFAULT_CSS = "RefcountTable { height: 1fr; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.find_text = ""
        self.marked: set[str] = set()

    @property
    def state(self) -> ConsoleState:
        """The app's mirror of daemon state."""
        return self.app.state  # type: ignore[attr-defined,no-any-return]

    def on_mount(self) -> None:
        self.add_column(" ", key="mark")
        self.add_column("chunk hash", key="hash")
        self.add_column("refcount", key="refcount")
        self.add_column("holders", key="holders")
        self.rebuild()

    def wants(self, h: str) -> bool:
        """True when the chunk is referenced and matches the find text."""
        return h in self.state.refcounts and self.find_text.lower() in h.lower()

    def cells(self, h: str) -> tuple[str, str, str, str]:
        """The row's cells."""
        holders = sorted(self.state.holders.get(h, set()))
        return (MARK if h in self.marked else " ", h, str(self.state.refcounts.get(h, 0)),
                others_text(holders, 6))

    def rebuild(self) -> None:
        """Redraw every row."""
        rc = self.state.refcounts
        self.clear()
        for h in sorted((h for h in rc if self.wants(h)), key=lambda h: (-rc[h], h)):
            self.add_row(*self.cells(h), key=h)

    def apply(self, changes: Changes) -> None:
        """Update, add or drop the rows of the chunks that changed."""
        if changes.reset or len(changes.chunks) > 2000:
            self.rebuild()
            return
        added = False
        for h in changes.chunks:
            present = h in self.rows
            if not self.wants(h):
                if present:
                    self.remove_row(h)
                continue
            cells = self.cells(h)
            if present:
                for key, value in zip(("mark", "hash", "refcount", "holders"), cells,
                                      strict=True):
                    self.update_cell(h, key, value, update_width=True)
            else:
                self.add_row(*cells, key=h)
                added = True
        if added:
            rc = self.state.refcounts
            self.sort("hash", key=lambda h: (-rc.get(str(h), 0), str(h)))

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
        """Marked chunks still referenced, else the one under the cursor."""
        marked = sorted(h for h in self.marked if h in self.state.refcounts)
        if marked:
            return marked
        h = self.current_hash()
        return [h] if h else []
