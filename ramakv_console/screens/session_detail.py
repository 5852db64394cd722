"""One session: its ordered chunk map with global refcounts, sharing, and recent events."""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Label, Static

from ramakv_console.screens.session_actions import SESSION_BINDINGS, SessionActionsMixin
from ramakv_console.state import ConsoleState
from ramakv_console.widgets.chunk_map_table import ChunkMapTable
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.trace_log import TraceLog


class SessionDetailScreen(SessionActionsMixin):
    """Pushed over the session table; escape goes back."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back"), *SESSION_BINDINGS]

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.session_id = session_id

    @property
    def state(self) -> ConsoleState:
        """The app's mirror of daemon state."""
        return self.app.state  # type: ignore[attr-defined,no-any-return]

    def compose(self) -> ComposeResult:
        yield Static("", id="detail-summary")
        yield ConnectionBanner(id="banner")
        yield Label("Chunk map (in order; highlighted = also held by other sessions)",
                    classes="section")
        yield ChunkMapTable(self.session_id, id="chunk-map")
        yield Label("Recent events", classes="section")
        yield TraceLog(session_id=self.session_id, id="session-events")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"Session {self.session_id}"
        self._summary()
        self.query_one(TraceLog).show(self.state.session_events(self.session_id))
        self.watch(self.app, "revision", self._on_revision, init=False)
        self.query_one(ChunkMapTable).focus()

    def _summary(self) -> None:
        s = self.state.sessions.get(self.session_id)
        box = self.query_one("#detail-summary", Static)
        forks = self.state.fork_ages(self.session_id)  # a closed parent's forks stay open
        if s is None:
            box.update(f"[b]{self.session_id}[/b]  [red]gone (closed)[/red]  "
                       f"open forks {escape(forks)}")
            return
        colour = "yellow" if s.state == "suspended" else "green"
        box.update(
            f"[b]{s.session_id}[/b]  [{colour}]{s.state}[/{colour}]  turns {s.turn_count}  "
            f"chunks {len(s.chunk_hashes)} ({len(set(s.chunk_hashes))} distinct)  "
            f"shared {self.state.shared_count(self.session_id)}  "
            f"open forks {escape(forks)}  last event {self.state.age(self.session_id)} ago"
        )

    def _on_revision(self, _revision: int) -> None:
        changes = self.app.last_changes  # type: ignore[attr-defined]
        s = self.state.sessions.get(self.session_id)
        mine = set(s.chunk_hashes) if s else set()
        if changes.reset or self.session_id in changes.sessions or mine & changes.chunks:
            self.query_one(ChunkMapTable).rebuild()
            self._summary()
        self.query_one(TraceLog).add(changes.events)

    def selected_session(self) -> str | None:
        return self.session_id
