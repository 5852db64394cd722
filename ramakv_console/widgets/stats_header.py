"""One line of totals: sessions, trace seq, node, distinct chunks, references, events/s."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.text import Text
from textual.widget import Widget

from ramakv_console.app_access import console_app


class StatsHeader(Widget):
    """Counts from the app's ConsoleState (kept as records arrive: nothing is recounted),
    redrawn on every applied batch and each second.

    A plain ``render`` plus ``refresh()``, not ``Static.update``: an update asks for a new
    layout of the whole screen, ten times a second under load.
    """

    DEFAULT_CSS = "StatsHeader { height: 1; }"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._text = ""

    def on_mount(self) -> None:
        self.watch(self.app, "revision", self._refresh_counts)
        self.set_interval(1.0, self._refresh_counts)

    def line(self) -> str:
        """The header's markup, most important first: at 80 columns the session count
        and the seq still show."""
        state = console_app(self).state
        suspended = state.suspended
        total = len(state.sessions)
        # On a store shared by several daemons: which node's sessions these are.
        node = f"[b]node[/b] {escape(state.node_id)}  " if state.node_id else ""
        return (
            f"[b]sessions[/b] {total} ({total - suspended} active, {suspended} suspended)  "
            f"[b]seq[/b] {state.seq}  {node}[b]chunks[/b] {state.chunk_total()}  "
            f"[b]references[/b] {state.references()}  "
            f"[b]events/s[/b] {state.events_per_second():.1f}  "
            f"[dim]{console_app(self).url}[/dim]"
        )

    def _refresh_counts(self, _revision: int | None = None) -> None:
        if not self.screen.is_current:
            return
        text = self.line()
        if text != self._text:
            self._text = text
            self.refresh()

    def render(self) -> Text:
        text = Text.from_markup(self._text or self.line(), overflow="crop")
        text.no_wrap = True
        return text
