"""One line of totals: sessions, trace seq, node, distinct chunks, references, events/s."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.text import Text
from textual.widget import Widget

from ramakv_console.context import ConsoleContext
from ramakv_console.state import Changes


class StatsHeader(Widget):
    """Counts from the console's ConsoleState (kept as records arrive: nothing is
    recounted), redrawn on every applied batch and each second.

    A plain ``render`` plus ``refresh()``, not ``Static.update``: an update asks for a new
    layout of the whole screen, ten times a second under load.
    """

    DEFAULT_CSS = "StatsHeader { height: 1; }"

    def __init__(self, ctx: ConsoleContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ctx = ctx
        self._text = ""

    def on_mount(self) -> None:
        self.ctx.updated.subscribe(self, self._refresh_counts, immediate=True)
        self.set_interval(1.0, self._refresh_counts)
        self._refresh_counts()

    def line(self) -> str:
        """The header's markup, most important first: at 80 columns the session count
        and the seq still show."""
        state = self.ctx.state
        suspended = state.suspended
        total = len(state.sessions)
        # On a store shared by several daemons: which node's sessions these are.
        node = f"[b]node[/b] {escape(state.node_id)}  " if state.node_id else ""
        return (
            f"[b]sessions[/b] {total} ({total - suspended} active, {suspended} suspended)  "
            f"[b]seq[/b] {state.seq}  {node}[b]chunks[/b] {state.chunk_total()}  "
            f"[b]references[/b] {state.references()}  "
            f"[b]events/s[/b] {state.events_per_second():.1f}  "
            f"[dim]{self.ctx.url}[/dim]"
        )

    def _refresh_counts(self, _changes: Changes | None = None) -> None:
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
