"""The live event log: pause/resume, filter by type or session, failed only."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Label

from ramakv_console.context import ConsoleContext
from ramakv_console.state import Changes
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.key_bar import KeyBar
from ramakv_console.widgets.stats_header import StatsHeader
from ramakv_console.widgets.trace_log import TraceLog


class TraceScreen(Screen[None]):
    """Every event as it happens (the last 5,000 kept)."""

    BINDINGS = [
        Binding("p", "toggle_pause", "Pause/resume"),
        Binding("slash", "focus_filter", "Filter"),
        Binding("f", "toggle_failed", "Failed only"),
        Binding("c", "clear_log", "Clear"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, ctx: ConsoleContext) -> None:
        super().__init__()
        self.ctx = ctx

    def compose(self) -> ComposeResult:
        yield StatsHeader(self.ctx, id="stats")
        yield ConnectionBanner(self.ctx, id="banner")
        yield Input(placeholder="/ filter by event type or session id", id="trace-filter")
        yield Label("", id="trace-status")
        yield TraceLog(id="trace-log")
        yield KeyBar()

    @property
    def log_widget(self) -> TraceLog:
        """The event log."""
        return self.query_one(TraceLog)

    def on_mount(self) -> None:
        self.sub_title = "Trace"
        self.log_widget.show(self.ctx.state.events)
        self.ctx.updated.subscribe(self, self._state_updated, immediate=True)
        self._status()
        self.log_widget.focus()

    def _state_updated(self, changes: Changes) -> None:
        # Also while another view shows: a write costs little (a line-API log, at most
        # 4 a second), and coming back needs no redraw from the history.
        if changes.dropped_events and not self.log_widget.paused:
            self.log_widget.note(f"… {changes.dropped_events} events of a burst not shown")
        self.log_widget.add(changes.events)
        if self.log_widget.paused:
            self._status()

    def on_screen_resume(self) -> None:
        self._status()
        self.log_widget.focus()

    def _status(self) -> None:
        log = self.log_widget
        parts = ["[b red]PAUSED[/] " + f"{len(log.held)} new waiting" if log.paused else "live"]
        if log.filter_text:
            parts.append(f"filter: '{log.filter_text}'")
        if log.failed_only:
            parts.append("failed only")
        self.query_one("#trace-status", Label).update(" · ".join(parts))

    def _redraw(self) -> None:
        self.log_widget.show(self.ctx.state.events)
        self._status()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.log_widget.filter_text = event.value.strip()
        self._redraw()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.log_widget.focus()

    def action_toggle_pause(self) -> None:
        shown = self.log_widget.set_paused(not self.log_widget.paused)
        if not self.log_widget.paused and shown:
            self.notify(f"Resumed: {shown} events caught up")
        self._status()

    def action_toggle_failed(self) -> None:
        self.log_widget.failed_only = not self.log_widget.failed_only
        self._redraw()

    def action_clear_log(self) -> None:
        self.log_widget.clear()

    def action_focus_filter(self) -> None:
        self.query_one("#trace-filter", Input).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#trace-filter", Input)
        if box.value:
            box.value = ""
        self.log_widget.focus()
