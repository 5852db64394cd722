"""A banner shown while the trace connection is down, naming what kind of failure."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static

from ramakv_console.context import Connection, ConsoleContext


class ConnectionBanner(Static):
    """Hidden while connected; says what went wrong and what happens next otherwise."""

    def __init__(self, ctx: ConsoleContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ctx = ctx

    def on_mount(self) -> None:
        self.ctx.connection_changed.subscribe(self, self._show, immediate=True)
        self._show(self.ctx.connection)

    def _show(self, connection: Connection) -> None:
        error = connection.error
        self.display = not connection.connected
        url = self.ctx.url
        detail = connection.detail or "connecting"
        if error == "unauthorized":
            text = (
                f"Daemon at {url} refused the console's token: {detail}. Start the "
                "console with --token, or set auth_token in the SDK config. Retrying "
                "every 30 s."
            )
        elif error == "protocol":
            text = (
                f"Daemon at {url} speaks another trace protocol: {detail}. Upgrade "
                "the console or the daemon. Retrying every 30 s."
            )
        elif error == "too_large":
            text = f"Trace message from {url} too large: {detail} — retrying with backoff."
        else:
            text = (
                f"Daemon unreachable at {url}: {detail} — retrying with backoff; the "
                "tables show the last known state."
            )
        self.update(text)
