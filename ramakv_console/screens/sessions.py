"""Home screen: the live session table with counts, filter and actions."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Label

from ramakv_console.context import ConsoleContext
from ramakv_console.screens.session_actions import SESSION_BINDINGS, SessionActionsMixin
from ramakv_console.state import Changes
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.key_bar import KeyBar
from ramakv_console.widgets.session_table import SORTS, SessionTable
from ramakv_console.widgets.stats_header import StatsHeader


class SessionsScreen(SessionActionsMixin):
    """Every session, updated from the trace."""

    BINDINGS = [
        Binding("slash", "focus_filter", "Filter"),
        Binding("o", "cycle_sort", "Sort"),
        Binding("v", "toggle_suspended", "Suspended"),
        *SESSION_BINDINGS,
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, ctx: ConsoleContext) -> None:
        super().__init__()
        self.ctx = ctx
        self._status_text = ""

    def compose(self) -> ComposeResult:
        yield StatsHeader(self.ctx, id="stats")
        yield ConnectionBanner(self.ctx, id="banner")
        yield Input(placeholder="/ filter by session id", id="session-filter")
        yield Label("", id="table-status")
        yield SessionTable(self.ctx.state, id="sessions")
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Sessions"
        self.ctx.updated.subscribe(self, self._state_updated, immediate=True)
        self._status()
        self.table.focus()

    @property
    def table(self) -> SessionTable:
        """The session table."""
        return self.query_one(SessionTable)

    def _state_updated(self, changes: Changes) -> None:
        # Also while another view shows: keeping the index costs O(log n) a changed row
        # and nothing is drawn, so coming back needs no re-index of every session.
        self.table.apply(changes)
        if self.is_current:
            self._status()

    def on_screen_resume(self) -> None:
        self._status()
        self.table.focus()  # typed text never lands in the filter box by surprise

    def _status(self) -> None:
        t = self.table
        total = len(self.ctx.state.sessions)
        parts = [f"showing {t.row_count} of {total}", f"sort: {t.sort_key}"]
        if self.ctx.state.loading:
            parts.append("loading…")
        if t.filter_text:
            parts.append(f"filter: '{t.filter_text}' (esc clears)")
        if not t.show_suspended:
            parts.append("suspended hidden")
        text = " · ".join(parts)
        if text != self._status_text:  # an unchanged label costs no repaint
            self._status_text = text
            self.query_one("#table-status", Label).update(text)

    def selected_session(self) -> str | None:
        return self.table.selected_id()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "session-filter":
            self.table.filter_text = event.value.strip()
            self.table.rebuild()
            self._status()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.table.focus()

    def action_focus_filter(self) -> None:
        self.query_one("#session-filter", Input).focus()

    def action_clear_filter(self) -> None:
        """Escape: clear the filter (if any) and go back to the table."""
        box = self.query_one("#session-filter", Input)
        if box.value:
            box.value = ""  # Input.Changed rebuilds the table
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
