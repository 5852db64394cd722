"""The live session table: a virtual list over a sorted index, drawing only visible rows.

50,000 sessions do not fit a DataTable (every row is a widget-side object with cells and
measured widths). Here a row is a key in a SortedList; a change moves only the rows it
touched (O(log n) each) and a repaint renders the lines on screen, whatever the total.
A line is built straight from segments (no Text per cell) and kept by what it shows, so
a row that only moved, or a repaint of rows that did not change, costs a lookup.
"""

from __future__ import annotations

import time
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from sortedcontainers import SortedList
from textual.binding import Binding
from textual.cache import LRUCache
from textual.events import Click
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer

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
# Under a stream whose rows move on screen (sorted by age or turns: every event moves its
# row to the top), the whole table repaints at most this often; keys still answer at once.
PAINT_EVERY = 0.25

HEAD = Style(bold=True, reverse=True)
CURSOR = Style(reverse=True)  # the cursor row while the table has focus
CURSOR_UNFOCUSED = Style(underline=True)
ACTIVE = Style(color="green")
SUSPENDED = Style(color="yellow")
DIM = Style(dim=True)
SHARED = Style(bold=True, color="cyan")

Part = tuple[str, Style | None]  # a piece of a cell's text and its style
Cell = tuple[Part, ...]
HEAD_CELLS: tuple[Cell, ...] = tuple(((label, None),) for _, label in COLUMNS)


def width_of(text: str) -> int:
    """Terminal cells ``text`` takes (ids and numbers are ASCII: one cell a character)."""
    return len(text) if text.isascii() else cell_len(text)


def fit(parts: Cell, width: int) -> list[Part]:
    """A cell's parts cut to ``width`` cells (an ellipsis where cut), the last padded to it
    (the padding takes its style: spaces look the same, and it saves a segment)."""
    out: list[Part] = []
    room = width
    for i, (text, style) in enumerate(parts):
        n = width_of(text)
        if n > room or (n == room and i < len(parts) - 1):
            out.append((set_cell_size(text, room - 1) + "…", style))
            return out
        out.append((text, style))
        room -= n
    if room:
        text, style = out[-1]
        out[-1] = (text + " " * room, style)
    return out


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

    def __init__(self, state: ConsoleState, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.filter_text = ""
        self.show_suspended = True
        self.sort_key = "id"
        self.index: SortedList = SortedList()
        self.keys: dict[str, tuple[Any, str]] = {}  # sid -> its key in ``index``
        self.cursor_row = 0
        self.id_width = 8
        # (cells, row style, id width) -> the whole line's strip; lines repaint often
        # (ages tick, rows move) but few of them change.
        self._strips: LRUCache[tuple[Any, ...], Strip] = LRUCache(1024)
        self._painted_at = 0.0  # time.monotonic() of the last whole repaint by ``apply``
        self._paint_timer: Timer | None = None  # a whole repaint waiting for PAINT_EVERY

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
        return s is not None and self._passes(s, self.filter_text.lower())

    def _passes(self, s: SessionView, text: str) -> bool:
        if not self.show_suspended and s.state == "suspended":
            return False
        return not text or text in s.session_id.lower() or text in s.namespace.lower()

    def cells(self, sid: str) -> tuple[Any, ...]:
        """The row's cell values (DataTable-like: numbers as numbers, styled text as Text)."""
        s = self.state.sessions[sid]
        state = Text(s.state, style="yellow" if s.state == "suspended" else "green")
        if s.namespace:
            state.append(f" {s.namespace[:12]}", style="dim")
        shared = s.shared_count
        shown: Any = (
            "…" if shared is None else (Text(str(shared), style="bold cyan") if shared else "0")
        )
        return (sid, state, s.turn_count, s.chunk_count, shown, s.fork_holds, self.state.age(sid))

    def _cells(self, sid: str) -> tuple[Cell, ...]:
        s = self.state.sessions[sid]
        state: Cell = ((s.state, SUSPENDED if s.state == "suspended" else ACTIVE),)
        if s.namespace:  # only deployments other than the default one are labelled
            state += ((f" {s.namespace[:12]}", DIM),)
        shared = s.shared_count
        shown: Part = ("…", None) if shared is None else (str(shared), SHARED if shared else None)
        return (
            ((sid, None),),
            state,
            ((str(s.turn_count), None),),
            ((str(s.chunk_count), None),),
            (shown,),
            ((str(s.fork_holds), None),),
            ((self.state.age(sid), None),),
        )

    # ---- updates ------------------------------------------------------------------------
    def rebuild(self) -> None:
        """Re-index every row (start-up, snapshot, filter or sort change)."""
        current = self.selected_id()
        mode = self.sort_key
        sessions = self.state.sessions
        text = self.filter_text.lower()
        if not text and self.show_suspended:  # every row: no test per session
            self.keys = {sid: sort_key(mode, s) for sid, s in sessions.items()}
        else:
            self.keys = {
                sid: sort_key(mode, s) for sid, s in sessions.items() if self._passes(s, text)
            }
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
        text = self.filter_text.lower()
        # The keys on screen: a row that stays in place is looked up only when it is
        # among them (most changed rows are off screen).
        shown = (index[top], index[min(bottom, len(index)) - 1]) if top < len(index) else None
        for sid in changes.sessions:
            old = self.keys.get(sid)
            s = sessions.get(sid)
            key = sort_key(mode, s) if s is not None and self._passes(s, text) else None
            if old is not None and key == old:
                if shown is not None and shown[0] <= old <= shown[1]:
                    lines.add(index.index(old))  # same place: only its cells may differ
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
            self._repaint_all()
        elif self._paint_timer is None:  # else the coming repaint draws these lines too
            width = self.size.width
            for pos in lines:
                self.refresh(Region(0, pos - top + 1, width, 1))

    def _repaint_all(self) -> None:
        """Repaint every line now, or PAINT_EVERY after the last such repaint."""
        wait = self._painted_at + PAINT_EVERY - time.monotonic()
        if wait <= 0:
            self._paint_now()
        elif self._paint_timer is None:
            self._paint_timer = self.set_timer(wait, self._paint_now)

    def _paint_now(self) -> None:
        self._paint_timer = None
        self._painted_at = time.monotonic()
        self.refresh()

    def _resize(self) -> None:
        width = self.id_width + sum(WIDTHS.values()) + len(WIDTHS) + 2
        self.virtual_size = Size(width, len(self.index) + 1)

    # ---- drawing -------------------------------------------------------------------------
    def _line(
        self, cells: tuple[Cell, ...], style: Style | None, scroll_x: int, width: int
    ) -> Strip:
        """The row as shown (cut to the view), cached by what it shows; neighbouring pieces
        of one style share a segment (fewer segments: less for Textual to cut and style)."""
        key = (cells, style, self.id_width, scroll_x, width)
        strip = self._strips.get(key)
        if strip is None:
            texts: list[str] = [" "]
            styles: list[Style | None] = [None]
            widths = (self.id_width, *WIDTHS.values())
            for cell, cell_width in zip(cells, widths, strict=True):
                for text, part_style in (*fit(cell, cell_width), (" ", None)):
                    if part_style is styles[-1]:
                        texts[-1] += text
                    else:
                        texts.append(text)
                        styles.append(part_style)
            whole = Strip(
                [
                    Segment(t, (style + st) if style and st else (st or style))
                    for t, st in zip(texts, styles, strict=True)
                ]
            )
            strip = whole.crop(scroll_x, scroll_x + width).extend_cell_length(width, style)
            self._strips[key] = strip
        return strip

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        if y == 0:
            return self._line(HEAD_CELLS, HEAD, scroll_x, width)
        row = scroll_y + y - 1
        if row >= len(self.index):
            return Strip.blank(width)
        sid = str(self.index[row][1])
        if sid not in self.state.sessions:
            return Strip.blank(width)
        style: Style | None = None
        if row == self.cursor_row:
            style = CURSOR if self.has_focus else CURSOR_UNFOCUSED
        return self._line(self._cells(sid), style, scroll_x, width)

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
