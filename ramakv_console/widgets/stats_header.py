"""One line of totals: sessions, distinct chunks, references, events/s, trace seq."""

from __future__ import annotations

from textual.widgets import Static


class StatsHeader(Static):
    """Counts from the app's ConsoleState (kept as records arrive: nothing is recounted),
    refreshed on every applied batch and each second."""

    def on_mount(self) -> None:
        self.watch(self.app, "revision", self._refresh_counts)
        self.set_interval(1.0, self._refresh_counts)

    def _refresh_counts(self, _revision: int | None = None) -> None:
        if not self.screen.is_current:
            return
        state = self.app.state  # type: ignore[attr-defined]
        suspended = state.suspended
        total = len(state.sessions)
        # Most important first: at 80 columns the count and the seq must still show.
        self.update(
            f"[b]sessions[/b] {total} ({total - suspended} active, {suspended} suspended)  "
            f"[b]seq[/b] {state.seq}  [b]chunks[/b] {state.chunk_total()}  "
            f"[b]references[/b] {state.references()}  "
            f"[b]events/s[/b] {state.events_per_second():.1f}  "
            f"[dim]{self.app.url}[/dim]"  # type: ignore[attr-defined]
        )
