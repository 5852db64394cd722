"""One session: its ordered chunk map with global refcounts, sharing, and recent events."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Label, Static

from ramakv_console.context import ConsoleContext
from ramakv_console.screens.session_actions import SESSION_BINDINGS, SessionActionsMixin
from ramakv_console.state import Changes, ConsoleState
from ramakv_console.widgets.chunk_map_table import ChunkMapTable
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.key_bar import KeyBar
from ramakv_console.widgets.trace_log import TraceLog


class SessionDetailScreen(SessionActionsMixin):
    """Pushed over the session table; escape goes back."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back"), *SESSION_BINDINGS]

    def __init__(self, ctx: ConsoleContext, session_id: str) -> None:
        super().__init__()
        self.ctx = ctx
        self.session_id = session_id
        self._shown_turns: tuple[int, int, str] | None = None

    @property
    def state(self) -> ConsoleState:
        """The console's mirror of daemon state."""
        return self.ctx.state

    def compose(self) -> ComposeResult:
        yield Static("", id="detail-summary")
        yield ConnectionBanner(self.ctx, id="banner")
        yield Label(
            "Chunk map (in order; highlighted = also held by other sessions)", classes="section"
        )
        yield ChunkMapTable(self.session_id, self.ctx.send, id="chunk-map")
        yield Label("Recent events", classes="section")
        yield TraceLog(session_id=self.session_id, id="session-events")
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = f"Session {self.session_id}"
        self._summary()
        self.query_one(TraceLog).show(self.state.session_events(self.session_id))
        self.ctx.updated.subscribe(self, self._state_updated, immediate=True)
        self.set_interval(1.0, self._summary)  # "last event … ago" ticks
        self.query_one(ChunkMapTable).focus()
        self.reload_map()

    @work(exclusive=True, group="detail-map")
    async def reload_map(self) -> None:
        """Fetch the map (on open, and when the session's map changed)."""
        s = self.state.sessions.get(self.session_id)
        self._shown_turns = (s.turn_count, s.chunk_count, s.state) if s else None
        await self.query_one(ChunkMapTable).load()
        self._summary()

    def _summary(self) -> None:
        s = self.state.sessions.get(self.session_id)
        box = self.query_one("#detail-summary", Static)
        forks = self.state.fork_ages(self.session_id)  # a closed parent's forks stay open
        if s is None:
            box.update(
                f"[b]{self.session_id}[/b]  [red]gone (closed)[/red]  open forks {escape(forks)}"
            )
            return
        table = self.query_one(ChunkMapTable)
        distinct = f" ({len(set(table.hashes))} distinct)" if table.loaded else ""
        colour = "yellow" if s.state == "suspended" else "green"
        shared = "…" if s.shared_count is None else s.shared_count
        box.update(
            f"[b]{s.session_id}[/b]  [{colour}]{s.state}[/{colour}]  turns {s.turn_count}  "
            f"chunks {s.chunk_count}{distinct}  shared {shared}  "
            f"open forks {escape(forks)}  last event {self.state.age(self.session_id)} ago"
            + (f"\n[red]map: {escape(table.error)}[/red]" if table.error else "")
        )

    def _state_updated(self, changes: Changes) -> None:
        s = self.state.sessions.get(self.session_id)
        if changes.reset or self.session_id in changes.sessions:
            now = (s.turn_count, s.chunk_count, s.state) if s else None
            if now != self._shown_turns or changes.reset:
                self.reload_map()
            self._summary()
        elif changes.chunks:
            self.query_one(ChunkMapTable).apply_refcounts(changes.chunks)
        self.query_one(TraceLog).add(changes.events)

    def selected_session(self) -> str | None:
        return self.session_id
