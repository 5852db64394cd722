"""One line of totals: sessions, distinct chunks, references, events/s, trace seq."""

from __future__ import annotations

from textual.widgets import Static


class StatsHeader(Static):
    """Counts from the app's ConsoleState, refreshed on every applied batch and each second."""

    def on_mount(self) -> None:
        self.watch(self.app, "revision", self._refresh_counts)
        self.set_interval(1.0, self._refresh_counts)

    def _refresh_counts(self, _revision: int | None = None) -> None:
        state = self.app.state  # type: ignore[attr-defined]
        suspended = sum(1 for s in state.sessions.values() if s.state == "suspended")
        total = len(state.sessions)
        self.update(
            f"[b]sessions[/b] {total} ({total - suspended} active, {suspended} suspended)  "
            f"[b]chunks[/b] {len(state.refcounts)}  [b]references[/b] {state.references()}  "
            f"[b]events/s[/b] {state.events_per_second():.1f}  [b]seq[/b] {state.seq}  "
            f"[dim]{self.app.url}[/dim]"  # type: ignore[attr-defined]
        )
