"""A banner shown while the trace connection is down, naming what kind of failure."""

from __future__ import annotations

from textual.widgets import Static

from ramakv_console.app_access import console_app


class ConnectionBanner(Static):
    """Hidden while connected; says what went wrong and what happens next otherwise."""

    def on_mount(self) -> None:
        self.watch(self.app, "connection_error", self._show)
        self.watch(self.app, "connection", self._show)

    def _show(self, _value: object = None) -> None:
        connected, detail = console_app(self).connection
        error = console_app(self).connection_error
        self.display = not connected
        url = console_app(self).url
        detail = detail or "connecting"
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
