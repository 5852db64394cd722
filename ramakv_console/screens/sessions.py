"""Home screen: the live session table with counts, filter and actions."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Input, Label

from ramakv_console.messages import Sessions
from ramakv_console.screens.session_actions import SESSION_BINDINGS, SessionActionsMixin
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.session_table import SORTS, SessionTable
from ramakv_console.widgets.stats_header import StatsHeader


class SessionsScreen(SessionActionsMixin):
    """Every session, updated from the trace."""

    BINDINGS = [
        Binding("slash", "focus_filter", "Filter"),
        Binding("v", "toggle_suspended", "Suspended on/off"),
        Binding("o", "cycle_sort", "Sort"),
        *SESSION_BINDINGS,
        Binding("escape", "focus_table", "Table", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield StatsHeader(id="stats")
        yield ConnectionBanner(id="banner")
        yield Input(placeholder="/ filter by session id", id="session-filter")
        yield Label("", id="table-status")
        yield SessionTable(id="sessions")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "Sessions"
        self.watch(self.app, "revision", self._on_revision, init=False)
        self._status()
        self.query_one(SessionTable).focus()

    @property
    def table(self) -> SessionTable:
        """The session table."""
        return self.query_one(SessionTable)

    def _on_revision(self, _revision: int) -> None:
        self.table.apply(self.app.last_changes)  # type: ignore[attr-defined]
        self._status()

    def _status(self) -> None:
        t = self.table
        shown = t.row_count
        total = len(self.app.state.sessions)  # type: ignore[attr-defined]
        parts = [f"showing {shown} of {total}", f"sort: {t.sort_key}"]
        if t.filter_text:
            parts.append(f"filter: '{t.filter_text}'")
        if not t.show_suspended:
            parts.append("suspended hidden")
        self.query_one("#table-status", Label).update(" · ".join(parts))

    def selected_session(self) -> str | None:
        return self.table.selected_id()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "session-filter":
            self.table.filter_text = event.value.strip()
            self.table.rebuild()
            self._status()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.post_message(Sessions.Open(event.row_key.value))

    def action_focus_filter(self) -> None:
        self.query_one("#session-filter", Input).focus()

    def action_focus_table(self) -> None:
        self.table.focus()

    def action_toggle_suspended(self) -> None:
        self.table.show_suspended = not self.table.show_suspended
        self.table.rebuild()
        self._status()

    def action_cycle_sort(self) -> None:
        t = self.table
        t.sort_key = SORTS[(SORTS.index(t.sort_key) + 1) % len(SORTS)]
        t.rebuild()
        self._status()
