"""The live session table: rows updated in place, filtered and sorted on demand."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import DataTable

from ramakv_console.state import Changes, ConsoleState

COLUMNS = (("id", "session"), ("state", "state"), ("turns", "turns"), ("chunks", "chunks"),
           ("shared", "shared"), ("forks", "fork holds"), ("age", "last event"))
SORTS = ("id", "state", "turns", "chunks", "age")


class SessionTable(DataTable[Any]):
    """Every session matching the filter; ``apply`` touches only the rows that changed."""

    DEFAULT_CSS = "SessionTable { height: 1fr; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.filter_text = ""
        self.show_suspended = True
        self.sort_key = "id"
        self._cells: dict[str, tuple[Any, ...]] = {}

    @property
    def state(self) -> ConsoleState:
        """The app's mirror of daemon state."""
        return self.app.state  # type: ignore[attr-defined,no-any-return]

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)
        self.rebuild()
        self.set_interval(2.0, self.refresh_ages)

    # ---- what a row shows -------------------------------------------------------------
    def wants(self, sid: str) -> bool:
        """True when the session passes the id filter and the suspended toggle."""
        s = self.state.sessions.get(sid)
        if s is None:
            return False
        if not self.show_suspended and s.state == "suspended":
            return False
        text = self.filter_text.lower()
        return text in sid.lower() or (bool(text) and text in s.namespace.lower())

    def cells(self, sid: str) -> tuple[Any, ...]:
        """The row's cell values."""
        st = self.state
        s = st.sessions[sid]
        state = Text(s.state, style="yellow" if s.state == "suspended" else "green")
        if s.namespace:  # only deployments other than the default one are labelled
            state.append(f" {s.namespace[:12]}", style="dim")
        shared = st.shared_count(sid)
        return (sid, state, s.turn_count, len(s.chunk_hashes),
                Text(str(shared), style="bold cyan") if shared else "0",
                len(s.fork_holds), st.age(sid))

    def ordered(self) -> list[str]:
        """Matching session ids in the current sort order."""
        st = self.state
        ids = [sid for sid in st.sessions if self.wants(sid)]
        key = self.sort_key
        if key == "state":
            ids.sort(key=lambda i: (st.sessions[i].state, i))
        elif key == "turns":
            ids.sort(key=lambda i: (-st.sessions[i].turn_count, i))
        elif key == "chunks":
            ids.sort(key=lambda i: (-len(st.sessions[i].chunk_hashes), i))
        elif key == "age":
            ids.sort(key=lambda i: (-st.sessions[i].last_event_ts, i))
        else:
            ids.sort()
        return ids

    # ---- updates ------------------------------------------------------------------------
    def rebuild(self) -> None:
        """Redraw every row (start-up, snapshot, filter or sort change)."""
        current = self.selected_id()
        self.clear()
        self._cells = {}
        for sid in self.ordered():
            cells = self.cells(sid)
            self._cells[sid] = cells
            self.add_row(*cells, key=sid)
        if current is not None and current in self._cells:
            self.move_cursor(row=self.get_row_index(current))

    def apply(self, changes: Changes) -> None:
        """Bring the changed sessions' rows up to date without touching the rest."""
        if changes.reset:
            self.rebuild()
            return
        added = False
        for sid in changes.sessions:
            present = sid in self._cells
            if not self.wants(sid):
                if present:
                    self.remove_row(sid)
                    del self._cells[sid]
                continue
            cells = self.cells(sid)
            if not present:
                self.add_row(*cells, key=sid)
                added = True
            else:
                old = self._cells[sid]
                for (key, _), before, after in zip(COLUMNS, old, cells, strict=True):
                    if str(before) != str(after):
                        self.update_cell(sid, key, after, update_width=True)
            self._cells[sid] = cells
        if added:
            self.resort()

    def resort(self) -> None:
        """Put rows back in sort order (after new rows were appended)."""
        st = self.state
        sessions = st.sessions

        def by(row: Any) -> Any:
            sid = str(row)
            s = sessions.get(sid)
            if s is None:
                return (1, sid)
            extra: Any = {"state": s.state, "turns": -s.turn_count,
                          "chunks": -len(s.chunk_hashes), "age": -s.last_event_ts}.get(
                              self.sort_key, "")
            return (0, extra, sid)

        self.sort("id", key=by)

    def refresh_ages(self) -> None:
        """Update the age column of the rows on screen only (cheap with 10,000 rows)."""
        if not self.row_count:
            return
        top = max(0, int(self.scroll_y))
        for row in self.ordered_rows[top: top + self.size.height + 1]:
            sid = row.key.value
            if sid in self._cells and sid in self.state.sessions:
                age = self.state.age(sid)
                if self._cells[sid][-1] != age:
                    self._cells[sid] = (*self._cells[sid][:-1], age)
                    self.update_cell(sid, "age", age)

    def selected_id(self) -> str | None:
        """The session under the cursor."""
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # cursor out of range after a removal
            return None
