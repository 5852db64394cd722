"""A banner shown while the trace connection is down."""

from __future__ import annotations

from textual.widgets import Static


class ConnectionBanner(Static):
    """Hidden while connected; says what went wrong and that it is retrying otherwise."""

    def on_mount(self) -> None:
        self.watch(self.app, "connection", self._show)

    def _show(self, connection: tuple[bool, str]) -> None:
        connected, detail = connection
        self.display = not connected
        url = self.app.url  # type: ignore[attr-defined]
        self.update(
            f"Daemon unreachable at {url}: {detail or 'connecting'} — retrying with backoff; "
            "the tables show the last known state."
        )
