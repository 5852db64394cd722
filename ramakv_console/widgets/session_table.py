"""The live session table: a virtual list over a sorted index, drawing only visible rows.

50,000 sessions do not fit a DataTable (every row is a widget-side object with cells and
measured widths). Here a row is a key in a SortedList; a change moves only the rows it
touched (O(log n) each) and a repaint renders the lines on screen, whatever the total.
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from sortedcontainers import SortedList
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ramakv_console.app_access import console_app
from ramakv_console.messages import Sessions
from ramakv_console.state import Changes, ConsoleState, SessionView

COLUMNS = (
    ("id", "session"),
    ("state", "state"),
    ("turns", "turns"),
    ("chunks", "chunks"),
    ("shared", "shared"),
    ("forks", "fork holds"),
    ("age", "last event"),
)
SORTS = ("id", "state", "turns", "chunks", "age")
WIDTHS = {"state": 10, "turns": 6, "chunks": 7, "shared": 7, "forks": 10, "age": 10}
MAX_ID_WIDTH = 40


def sort_key(mode: str, s: SessionView) -> tuple[Any, str]:
    """Where a session goes in the ``mode`` order (ties by id)."""
    if mode == "state":
        return (s.state, s.session_id)
    if mode == "turns":
        return (-s.turn_count, s.session_id)
    if mode == "chunks":
        return (-s.chunk_count, s.session_id)
    if mode == "age":
        return (-s.last_event_ts, s.session_id)
    return ("", s.session_id)


class SessionTable(ScrollView, can_focus=True):
    """Every session matching the filter; ``apply`` touches only the rows that changed."""

    DEFAULT_CSS = "SessionTable { height: 1fr; }"
    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "First", show=False),
        Binding("end", "jump(-1)", "Last", show=False),
        Binding("enter", "open", "Detail", show=False),
    ]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.filter_text = ""
        self.show_suspended = True
        self.sort_key = "id"
        self.index: SortedList = SortedList()
        self.keys: dict[str, tuple[Any, str]] = {}  # sid -> its key in ``index``
        self.cursor_row = 0
        self.id_width = 8

    @property
    def state(self) -> ConsoleState:
        """The app's mirror of daemon state."""
        return console_app(self).state

    # ---- DataTable-like surface (tests and screens use it) -----------------------------
    @property
    def row_count(self) -> int:
        """Rows shown (matching the filter)."""
        return len(self.index)

    @property
    def rows(self) -> dict[str, tuple[Any, str]]:
        """The shown session ids (as keys)."""
        return self.keys

    def get_row_index(self, sid: str) -> int:
        """Position of a shown session."""
        return int(self.index.index(self.keys[sid]))

    def get_row(self, sid: str) -> tuple[Any, ...]:
        """The cells of a shown session's row."""
        return self.cells(sid)

    def visible_ids(self) -> list[str]:
        """The sessions of the rows on screen."""
        top = int(self.scroll_offset.y)
        return [str(key[1]) for key in self.index[top : top + max(1, self.size.height)]]

    def move_cursor(self, row: int) -> None:
        """Put the cursor on ``row`` and scroll it into view."""
        self.cursor_row = max(0, min(row, len(self.index) - 1))
        self._follow_cursor()
        self.refresh()

    def selected_id(self) -> str | None:
        """The session under the cursor."""
        if not self.index:
            return None
        return str(self.index[min(self.cursor_row, len(self.index) - 1)][1])

    # ---- what a row shows -------------------------------------------------------------
    def on_mount(self) -> None:
        self.rebuild()
        self.set_interval(1.0, self.refresh)  # ages tick; only visible lines are drawn

    def wants(self, sid: str) -> bool:
        """True when the session passes the id filter and the suspended toggle."""
        s = self.state.sessions.get(sid)
        if s is None:
            return False
        if not self.show_suspended and s.state == "suspended":
            return False
        text = self.filter_text.lower()
        return text in sid.lower() or (bool(text) and text in s.namespace.lower())

    def cells(self, sid: str) -> tuple[Any, ...]:
        """The row's cell values."""
        s = self.state.sessions[sid]
        state = Text(s.state, style="yellow" if s.state == "suspended" else "green")
        if s.namespace:  # only deployments other than the default one are labelled
            state.append(f" {s.namespace[:12]}", style="dim")
        shared = s.shared_count
        shown: Any = (
            "…" if shared is None else (Text(str(shared), style="bold cyan") if shared else "0")
        )
        return (sid, state, s.turn_count, s.chunk_count, shown, s.fork_holds, self.state.age(sid))

    # ---- updates ------------------------------------------------------------------------
    def rebuild(self) -> None:
        """Re-index every row (start-up, snapshot, filter or sort change)."""
        current = self.selected_id()
        mode = self.sort_key
        sessions = self.state.sessions
        self.keys = {sid: sort_key(mode, s) for sid, s in sessions.items() if self.wants(sid)}
        self.index = SortedList(self.keys.values())
        longest = max((len(sid) for sid in self.keys), default=8)
        self.id_width = max(8, min(MAX_ID_WIDTH, longest))
        self._resize()
        if current is not None and current in self.keys:
            self.cursor_row = self.get_row_index(current)
        self.move_cursor(self.cursor_row)

    def apply(self, changes: Changes) -> None:
        """Move the changed sessions' rows; the rest stay as they are."""
        if changes.reset:
            self.rebuild()
            return
        if not changes.sessions:
            return
        current = self.selected_id()
        mode = self.sort_key
        sessions = self.state.sessions
        top = int(self.scroll_offset.y)
        bottom = top + max(1, self.size.height - 1)
        shifted = False  # rows on screen moved: repaint all of it
        lines: set[int] = set()  # else only these rows changed in place
        index = self.index
        for sid in changes.sessions:
            old = self.keys.get(sid)
            key = sort_key(mode, sessions[sid]) if self.wants(sid) else None
            if old is not None and key == old:
                pos = index.index(old)  # same place: only its cells may differ
                if top <= pos < bottom:
                    lines.add(pos)
                continue
            if old is not None:
                del self.keys[sid]
                shifted = shifted or index.index(old) < bottom
                index.remove(old)
            if key is not None:
                self.keys[sid] = key
                index.add(key)
                shifted = shifted or index.index(key) < bottom
                if len(sid) > self.id_width and self.id_width < MAX_ID_WIDTH:
                    self.id_width = min(MAX_ID_WIDTH, len(sid))
                    shifted = True
        if self.virtual_size.height != len(index) + 1:
            self._resize()
        if current is not None and current in self.keys:
            self.cursor_row = self.get_row_index(current)
        self.cursor_row = max(0, min(self.cursor_row, len(index) - 1))
        if shifted:
            self.refresh()
        else:
            width = self.size.width
            for pos in lines:
                self.refresh(Region(0, pos - top + 1, width, 1))

    def _resize(self) -> None:
        width = self.id_width + sum(WIDTHS.values()) + len(WIDTHS) + 2
        self.virtual_size = Size(width, len(self.index) + 1)

    # ---- drawing -------------------------------------------------------------------------
    def _line(self, values: tuple[Any, ...], style: Style | None = None) -> list[Segment]:
        segments: list[Segment] = [Segment(" ", style)]
        widths = (self.id_width, *WIDTHS.values())
        for value, width in zip(values, widths, strict=True):
            text = value.copy() if isinstance(value, Text) else Text(str(value))
            text.truncate(width, overflow="ellipsis", pad=True)
            for seg in text.render(self.app.console):
                segments.append(
                    Segment(
                        seg.text,
                        (style + seg.style) if style and seg.style else (seg.style or style),
                    )
                )
            segments.append(Segment(" ", style))
        return segments

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x = int(self.scroll_offset.x)
        if y == 0:
            head = Style(bold=True, reverse=True)
            labels = tuple(label for _, label in COLUMNS)
            strip = Strip(self._line(labels, head))
            return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width, head)
        row = int(self.scroll_offset.y) + y - 1
        if row >= len(self.index):
            return Strip.blank(width)
        sid = str(self.index[row][1])
        if sid not in self.state.sessions:
            return Strip.blank(width)
        style: Style | None = None
        if row == self.cursor_row:
            style = Style(reverse=True) if self.has_focus else Style(underline=True)
        strip = Strip(self._line(self.cells(sid), style))
        return strip.crop(scroll_x, scroll_x + width).extend_cell_length(width, style)

    # ---- keys ----------------------------------------------------------------------------
    def _follow_cursor(self) -> None:
        visible = max(1, self.size.height - 1)
        top = int(self.scroll_offset.y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)

    def action_move(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step * max(1, self.size.height - 1))

    def action_jump(self, where: int) -> None:
        self.move_cursor(len(self.index) - 1 if where < 0 else 0)

    def action_open(self) -> None:
        sid = self.selected_id()
        if sid is not None:
            self.post_message(Sessions.Open(sid))

    def on_click(self, event: Click) -> None:
        row = int(self.scroll_offset.y) + event.y - 1
        if 0 <= row < len(self.index):
            if row == self.cursor_row and event.chain > 1:
                self.action_open()
            self.move_cursor(row)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
