"""Edit the daemon's config file and the SDK's: validate, show the diff, write atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static, TabbedContent, TabPane

from ramakv_console import config_io
from ramakv_console.messages import Config
from ramakv_console.screens.confirm import ConfirmDialog
from ramakv_console.widgets.config_form import ConfigForm
from ramakv_console.widgets.key_bar import KeyBar


class ConfigScreen(Screen[None]):
    """Two tabs: daemon config and SDK config; ctrl+s reviews and saves the visible one."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Review & save", priority=True),
        Binding("ctrl+o", "reload", "Reload from disk"),
    ]

    def __init__(
        self, daemon_path: Path | None = None, sdk_path: Path | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.paths = {
            "daemon": daemon_path or config_io.daemon_config_path(),
            "sdk": sdk_path or config_io.sdk_config_path(),
        }
        self.specs = {"daemon": config_io.DAEMON_FIELDS, "sdk": config_io.SDK_FIELDS}
        self.originals: dict[str, dict[str, Any]] = {"daemon": {}, "sdk": {}}

    def compose(self) -> ComposeResult:
        with TabbedContent(id="config-tabs"):
            for which, title in (("daemon", "Daemon config"), ("sdk", "SDK config")):
                with TabPane(title, id=f"tab-{which}"):
                    yield Static("", id=f"{which}-info", classes="config-info")
                    yield ConfigForm(self.specs[which], id=which)
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Config"
        self.action_reload()

    def action_reload(self) -> None:
        for which in ("daemon", "sdk"):
            path = self.paths[which]
            problem = ""
            try:
                data = config_io.load(path)
            except ValueError as err:
                problem = f"\n[red]{escape(str(err))}[/red] — saving will replace it"
                data = {}
            self.originals[which] = data
            self.query_one(f"#{which}", ConfigForm).fill(data)
            edited = {s.name for s in self.specs[which]}
            as_is = config_io.KEPT_AS_IS if which == "daemon" else frozenset()
            kept = sorted(k for k in data if k in as_is)
            unknown = sorted(k for k in data if k not in edited and k not in as_is)
            state = "" if path.exists() else " (does not exist yet; saving creates it)"
            text = f"[b]{escape(str(path))}[/b]{state}{problem}"
            if kept:
                text += f"\nkept as they are (edit them in the file): {', '.join(kept)}"
            if unknown:
                why = "not edited here" if which == "sdk" else "the daemon ignores them"
                text += f"\nkept as they are ({why}): {escape(', '.join(unknown))}"
            text += "\n[dim]Comments are not preserved: the file is rewritten with tomli-w.[/dim]"
            if which == "daemon":
                text += "\n[dim]The daemon reads this at start-up: changes need a restart.[/dim]"
            self.query_one(f"#{which}-info", Static).update(text)

    def current(self) -> str:
        """'daemon' or 'sdk', whichever tab is showing."""
        active = self.query_one(TabbedContent).active
        return "sdk" if active == "tab-sdk" else "daemon"

    def action_save(self) -> None:
        self.review(self.current())

    @work(exclusive=True, group="config")
    async def review(self, which: str) -> None:
        """Validate, show the diff, write on confirmation."""
        form = self.query_one(f"#{which}", ConfigForm)
        values, errors = form.read()
        if errors:
            self.notify(
                "Fix the fields marked in red:\n" + "\n".join(errors), severity="error", timeout=8
            )
            return
        merged, diffs = config_io.merge(self.originals[which], values, self.specs[which])
        if not diffs:
            self.notify("No changes to save")
            return
        path = self.paths[which]
        lines = [d.line() for d in diffs]
        restart = [d.key for d in diffs if d.needs_restart]
        if restart:
            lines += ["", f"Needs a daemon restart: {', '.join(restart)}"]
        if which == "sdk":
            lines += ["", "The console and SDK clients read daemon_url when they start."]
        choice = await self.app.push_screen_wait(
            ConfirmDialog(
                f"Write {path}?",
                lines,
                [("write", "Write", "primary"), ("cancel", "Cancel", "default")],
            )
        )
        if choice != "write":
            return
        try:
            backup = config_io.write_atomic(path, merged)
        except OSError as err:
            self.notify(f"Could not write {path}: {err}", severity="error", timeout=10)
            return
        self.originals[which] = merged
        note = f" (previous kept as {backup.name})" if backup else ""
        msg = f"Saved {path}{note}."
        if restart:
            msg += " Restart the daemon to apply: " + ", ".join(restart)
        self.notify(msg, timeout=8)
        self.post_message(Config.Saved(str(path), [d.key for d in diffs]))
