"""Home screen: the live session table with counts, filter and actions."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Label

from ramakv_console.app_access import console_app
from ramakv_console.screens.session_actions import SESSION_BINDINGS, SessionActionsMixin
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

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._stale = False
        self._status_text = ""

    def compose(self) -> ComposeResult:
        yield StatsHeader(id="stats")
        yield ConnectionBanner(id="banner")
        yield Input(placeholder="/ filter by session id", id="session-filter")
        yield Label("", id="table-status")
        yield SessionTable(id="sessions")
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Sessions"
        self.watch(self.app, "revision", self._on_revision, init=False)
        self._status()
        self.table.focus()

    @property
    def table(self) -> SessionTable:
        """The session table."""
        return self.query_one(SessionTable)

    def _on_revision(self, _revision: int) -> None:
        if not self.is_current:  # another view is showing: catch up when it comes back
            self._stale = True
            return
        self.table.apply(console_app(self).last_changes)
        self._status()

    def on_screen_resume(self) -> None:
        if self._stale:
            self._stale = False
            self.table.rebuild()
            self._status()
        self.table.focus()  # typed text never lands in the filter box by surprise

    def _status(self) -> None:
        t = self.table
        total = len(console_app(self).state.sessions)
        parts = [f"showing {t.row_count} of {total}", f"sort: {t.sort_key}"]
        if console_app(self).state.loading:
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
