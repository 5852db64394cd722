"""The Textual app: the composition root of the console. It builds the shared context and
the screens (each given the context, never the app), follows the trace, sends events."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Select

from ramakv_console import config_io
from ramakv_console.context import Catalogue, Connection, ConsoleContext
from ramakv_console.daemon_link import DaemonLink, LinkDown, open_link, token_for
from ramakv_console.messages import Daemon, Sessions
from ramakv_console.screens.config_editor import ConfigScreen
from ramakv_console.screens.fire_event import FireEventScreen
from ramakv_console.screens.help import HelpScreen
from ramakv_console.screens.refcounts import RefcountsScreen
from ramakv_console.screens.session_detail import SessionDetailScreen
from ramakv_console.screens.sessions import SessionsScreen
from ramakv_console.screens.trace import TraceScreen
from ramakv_console.state import STATUS, ConsoleState
from ramakv_console.themes import DEFAULT_THEME, load_themes
from ramakv_console.widgets.session_table import SessionTable


def readable(data: Any) -> str:
    """An answer's data as `key=value` pairs (JSON spelling: true, null), not a dict repr."""
    if not isinstance(data, dict):
        return json.dumps(data)
    parts = []
    for k, v in data.items():
        shown = v if isinstance(v, str) else json.dumps(v)
        parts.append(f"{k}={shown}")
    return ", ".join(parts) or "ok"


SHARED_READ_MAX = 200  # up to this many sessions every one is re-read, else the shown rows

VIEWS = {
    "sessions": "Sessions",
    "refcounts": "Refcounts",
    "trace": "Trace",
    "fire": "Fire an event",
    "config": "Config editor",
}


class ConsoleApp(App[None]):
    """ram-a-kv operator console."""

    CSS_PATH = "app.tcss"
    TITLE = "ram-a-kv console"
    DEFAULT_MODE = "sessions"
    BINDINGS = [
        Binding("1", "view('sessions')", "Sessions"),
        Binding("2", "view('refcounts')", "Refcounts"),
        Binding("3", "view('trace')", "Trace"),
        Binding("4", "view('fire')", "Fire"),
        Binding("5", "view('config')", "Config"),
        Binding("question_mark,f1", "help", "Help"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        url: str,
        link: DaemonLink | None = None,
        *,
        daemon_config: Path | None = None,
        sdk_config: Path | None = None,
        theme: str | None = None,
        theme_dirs: list[Path] | None = None,
        clock: Callable[[], float] = time.time,
        flush_every: float = 0.1,
        token: str | None = None,
    ) -> None:
        super().__init__()
        self.url = url
        self.sdk_config_path = sdk_config or config_io.sdk_config_path()
        self.link: DaemonLink = link or open_link(
            url, token if token is not None else token_for(url, self.sdk_config_path)
        )
        self.state = ConsoleState(clock=clock)
        self.ctx = ConsoleContext(self, url, self.state, self.send_event)
        self.daemon_config_path = daemon_config or config_io.daemon_config_path()
        self.wanted_theme = theme
        self.theme_dirs = theme_dirs
        self.flush_every = flush_every
        self._pending: list[dict[str, Any]] = []
        self._shared_stale = False  # a record said shown shared counts may be old
        self._shared_reading = False
        ctx = self.ctx
        for mode, build in {
            "sessions": lambda: SessionsScreen(ctx),
            "refcounts": lambda: RefcountsScreen(ctx),
            "trace": lambda: TraceScreen(ctx),
            "fire": lambda: FireEventScreen(ctx),
            "config": lambda: ConfigScreen(self.daemon_config_path, self.sdk_config_path),
        }.items():
            self.add_mode(mode, build)

    # What the trace and list_events said, for callers outside the views (tests, probes).
    @property
    def connection(self) -> tuple[bool, str]:
        """(connected, detail) of the trace connection."""
        return self.ctx.connection.connected, self.ctx.connection.detail

    @property
    def connection_error(self) -> str:
        """What kind of failure the trace connection had ("" while connected)."""
        return self.ctx.connection.error

    @property
    def catalogue(self) -> dict[str, Any]:
        """Every event list_events named (contract and admin)."""
        return self.ctx.catalogue.events

    @property
    def admin_events(self) -> frozenset[str]:
        """The events list_events calls admin."""
        return self.ctx.catalogue.admin

    def on_mount(self) -> None:
        self._install_themes()
        self.set_interval(self.flush_every, self.flush)
        self.follow_trace()

    def _install_themes(self) -> None:
        themes, problems = load_themes(self.theme_dirs)
        for t in themes:
            self.register_theme(t)
        for p in problems:
            self.notify(
                f"Theme file {p.path.name} ignored ({p.reason}); using the default.",
                title="Theme",
                severity="warning",
                timeout=10,
            )
        names = {t.name for t in themes}
        want = self.wanted_theme or DEFAULT_THEME
        if want in names or want in self.available_themes:
            self.theme = want
        else:
            if self.wanted_theme:
                self.notify(f"Theme '{want}' not found; using the default.", severity="warning")
            self.theme = DEFAULT_THEME if DEFAULT_THEME in names else "textual-dark"

    # ---- the trace ----------------------------------------------------------------------
    @work(exclusive=True, group="trace")
    async def follow_trace(self) -> None:
        """Read trace records into a buffer that ``flush`` applies in batches."""
        pending = self._pending
        async for rec in self.link.trace():
            pending.append(rec)
            if rec.get("kind") == STATUS:
                connected = bool(rec.get("connected"))
                self.ctx.connection = Connection(
                    connected,
                    str(rec.get("detail", "")),
                    "" if connected else str(rec.get("error") or ""),
                )
                self.ctx.connection_changed.publish(self.ctx.connection)
                self.post_message(Daemon.ConnectionChanged(connected, self.ctx.connection.detail))
                if connected:
                    self.load_catalogue()

    def flush(self) -> None:
        """Apply what arrived since the last flush, then let every view catch up once.

        Records are coalesced: at most one batch per ``flush_every`` (0.1 s), whatever the
        event rate, and each view's work follows what the batch changed. The views hear it
        through ``ctx.updated`` (a signal: no app-wide reactive, so no full-screen repaint
        per batch; each view redraws only the lines it changed).
        """
        if not self._pending:
            return
        batch = self._pending[:]
        self._pending.clear()  # the same list: follow_trace appends to it
        changes = self.state.apply(batch)
        self.ctx.updated.publish(changes)
        self.post_message(Daemon.StateUpdated(changes))
        self._shared_stale = self._shared_stale or changes.shared_stale
        if self._shared_stale and not self._shared_reading:
            self._shared_stale, self._shared_reading = False, True
            self.read_shared()

    def shared_targets(self) -> list[str]:
        """The sessions whose shared_count to re-read: every one up to SHARED_READ_MAX,
        else those on screen (the session table's rows, the open session's detail)."""
        ids = self.state.sessions
        if len(ids) <= SHARED_READ_MAX:
            return list(ids)
        shown: list[str] = []
        for table in self.screen.query(SessionTable):
            shown.extend(table.visible_ids())
        if isinstance(self.screen, SessionDetailScreen):
            shown.append(self.screen.session_id)
        return shown[:SHARED_READ_MAX]

    @work(group="shared-read")
    async def read_shared(self) -> None:
        """Re-read the shown sessions' shared_count: a chunk crossing 1 <-> 2 changes
        it for holders the trace record does not list (docs/trace.md)."""
        try:
            ids = self.shared_targets()
            if not ids:
                return
            self.state.ask_shared(ids)
            env = await self.send_event(
                {"type": "list_sessions", "session_ids": ids, "limit": len(ids)}, quiet=True
            )
            if env.get("ok"):
                changes = self.state.apply_shared((env.get("data") or {}).get("sessions") or ())
                self.ctx.updated.publish(changes)
                self.post_message(Daemon.StateUpdated(changes))
        finally:
            self._shared_reading = False

    # ---- talking to the daemon ----------------------------------------------------------
    async def send_event(self, event: dict[str, Any], quiet: bool = False) -> dict[str, Any]:
        """POST an event; the envelope, or an ok:false one when the daemon is unreachable.

        ``quiet``: the views' own reads (pages of maps and refcounts) are not announced.
        """
        try:
            envelope = await self.link.send(event)
        except LinkDown as err:
            envelope = {
                "ok": False,
                "type": event.get("type"),
                "error": f"daemon unreachable: {err}",
            }
        if not quiet:
            self.post_message(Daemon.EventAnswered(event, envelope))
        return envelope

    @work(exclusive=True, group="catalogue")
    async def load_catalogue(self) -> None:
        """Fetch list_events for the fire-event form."""
        env = await self.send_event({"type": "list_events"})
        if env.get("ok"):
            data = env.get("data") or {}
            admin = dict(data.get("admin_events") or {})
            self.ctx.catalogue = Catalogue(
                {**dict(data.get("events") or {}), **admin}, frozenset(admin)
            )
            self.ctx.catalogue_loaded.publish(self.ctx.catalogue)

    def on_daemon_reload_catalogue(self, _msg: Daemon.ReloadCatalogue) -> None:
        self.load_catalogue()

    def on_sessions_act(self, msg: Sessions.Act) -> None:
        self.run_session_action(msg.event_type, msg.session_id)

    @work(group="session-actions")
    async def run_session_action(self, event_type: str, session_id: str) -> None:
        """Send a session event and say how it went."""
        env = await self.send_event({"type": event_type, "session_id": session_id})
        if env.get("ok"):
            self.notify(f"{event_type} {session_id}: {readable(env.get('data'))}")
        else:
            self.notify(f"{event_type} {session_id} failed: {env.get('error')}", severity="error")

    def on_sessions_open(self, msg: Sessions.Open) -> None:
        self.push_screen(SessionDetailScreen(self.ctx, msg.session_id))

    async def on_sessions_fire(self, msg: Sessions.Fire) -> None:
        await self.open_fire(msg.session_id)

    # ---- navigation ---------------------------------------------------------------------
    async def action_view(self, mode: str) -> None:
        await self.switch_mode(mode)

    async def open_fire(self, session_id: str | None = None) -> None:
        """Switch to the fire-event view with session_id prefilled."""
        await self.switch_mode("fire")
        screen = self.screen
        if isinstance(screen, FireEventScreen):
            form_type = screen.query_one("#event-type", Select).value
            kind = form_type if isinstance(form_type, str) else "turn_end"
            await screen.choose(kind, session_id=session_id)
            screen.focus_first_field()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for mode, title in VIEWS.items():
            yield SystemCommand(
                f"Go to {title}", f"switch view ({mode})", partial(self.action_view, mode)
            )
        yield SystemCommand("Help", "keys and what each view does", self.action_help)
        for key, active in screen.active_bindings.items():
            b = active.binding
            if b.description and b.show and active.node is screen:
                yield SystemCommand(
                    f"{screen.sub_title or 'View'}: {b.description}",
                    f"key {key}",
                    partial(screen.run_action, b.action),
                )

    async def on_unmount(self) -> None:
        await self.link.aclose()
