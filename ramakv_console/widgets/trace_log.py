"""A scrollable event log: ok green, failed red; pause, filter, connection notes."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer

from ramakv_console.state import STATUS


def describe(rec: dict[str, Any]) -> str:
    """The part of a record after its type and session: data, error or effects."""
    if not rec.get("ok"):
        return f"error: {rec.get('error', '')}"
    parts = []
    data = rec.get("data") or {}
    if isinstance(data, dict) and "events" not in data:
        parts.append(" ".join(f"{k}={v}" for k, v in data.items()))
    for key in ("prefetch", "evict", "demote", "cold"):
        if rec.get(key):
            parts.append(f"{key}={len(rec[key])}")
    reason = (rec.get("notes") or {}).get("reason")
    if reason:  # who decided a lifecycle event and why (ramakv-proxy: tool_pause, idle...)
        parts.append(f"reason={reason}")
    return "  ".join(p for p in parts if p)


Part = tuple[str, Style | None]

DIM = Style(dim=True)
OK = Style(bold=True, color="green")
FAIL = Style(bold=True, color="red")
BOLD = Style(bold=True)
RED = Style(color="red")
UP = Style(bold=True, color="green")
DOWN = Style(bold=True, color="white", bgcolor="red")
NOTE = Style(dim=True, italic=True)


def line(rec: dict[str, Any]) -> list[Part]:
    """One record as a coloured line: its pieces and their styles."""
    if rec.get("kind") == STATUS:
        word = "trace connected" if rec.get("connected") else "connection lost"
        detail = rec.get("detail", "")
        if detail and detail != "connected":
            word += f": {detail}"
        return [(f"──── {word} ────", UP if rec.get("connected") else DOWN)]
    stamp = time.strftime("%H:%M:%S", time.localtime(rec.get("ts") or 0))
    ok = bool(rec.get("ok"))
    return [
        (f"{rec.get('seq', ''):>7} {stamp} ", DIM),
        ("ok  ", OK) if ok else ("FAIL", FAIL),
        (f" {rec.get('type', '?'):<18}", BOLD),
        (f" {rec.get('session_id') or '-':<20} ", None),
        (describe(rec), None if ok else RED),
    ]


def note_line(text: str) -> list[Part]:
    """A line of the console's own, dim."""
    return [(text, NOTE)]


def as_strip(parts: list[Part]) -> Strip:
    """The line, ready to draw (no Rich rendering: its pieces are its segments)."""
    return Strip([Segment(text, style) for text, style in parts if text])


PER_WRITE = 12  # newest lines written at a time (what a reader can follow)
WRITE_EVERY = 0.25  # under a stream, the log is written at most this often
MAX_LINES = 1000  # lines the log keeps to scroll back through


class TraceLog(ScrollView, can_focus=True):
    """Appends trace records; while paused new ones wait and are written on resume.

    A line-API log (a RichLog renders and measures every line through Rich: half a
    millisecond a line, 0.5 s to refill a view) kept cheap under a stream of events:
    records arrive in batches (10 a second) but the log is written at most every
    WRITE_EVERY, the newest PER_WRITE lines at a time; it is filled to MAX_LINES from the
    history when shown, so that writes leave its size alone (a log that grows lays out
    the whole screen again). It follows the newest line unless scrolled back.
    """

    DEFAULT_CSS = """
    TraceLog {
        background: $surface;
        color: $foreground;
        overflow-y: scroll;
        &:focus {
            background-tint: $foreground 5%;
        }
    }
    """

    def __init__(self, session_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session_id = session_id
        self.filter_text = ""
        self.failed_only = False
        self.paused = False
        self.held: list[dict[str, Any]] = []
        self.lines: deque[Strip] = deque(maxlen=MAX_LINES)
        self._widest = 0
        self._queued: list[dict[str, Any] | list[Part]] = []  # records or notes, next
        self._skipped = 0  # records left out of the queue since the last write
        self._written_at = 0.0  # time.monotonic() of the last write of the queue
        self._timer: Timer | None = None
        self._follow = True  # on the newest line (False once scrolled back)
        self._end_asked = False  # a scroll to the newest line is waiting for a refresh

    def wants(self, rec: dict[str, Any]) -> bool:
        """True when the record passes the session, text and failed-only filters."""
        if rec.get("kind") == STATUS:
            return self.session_id is None
        sid = rec.get("session_id") or ""
        if (
            self.session_id is not None
            and sid != self.session_id
            and self.session_id not in (rec.get("delta") or {}).get("sessions", {})
        ):
            return False
        if self.failed_only and rec.get("ok"):
            return False
        f = self.filter_text.lower()
        return not f or f in str(rec.get("type", "")).lower() or f in sid.lower()

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """Write new records (or hold them while paused); of a burst only the newest
        PER_WRITE are written (nobody reads 1,000 lines a second; writing them would
        delay the keys), with a line saying how many were left out."""
        if self.paused:
            self.held.extend(records)
            del self.held[: max(0, len(self.held) - MAX_LINES)]
            return
        self._queue([rec for rec in records if self.wants(rec)])

    def note(self, text: str) -> None:
        """A dim line of the console's own (e.g. how many records a burst skipped)."""
        self._queue([note_line(text)])

    def _queue(self, items: list[dict[str, Any] | list[Part]]) -> None:
        if not items:
            return
        self._queued += items
        over = len(self._queued) - PER_WRITE
        if over > 0:
            self._skipped += sum(1 for x in self._queued[:over] if isinstance(x, dict))
            del self._queued[:over]
        wait = self._written_at + WRITE_EVERY - time.monotonic()
        if wait <= 0:
            self._write_queued()
        elif self._timer is None:
            self._timer = self.set_timer(wait, self._write_queued)

    def _write_queued(self) -> None:
        self._timer = None
        self._written_at = time.monotonic()
        lines = [line(x) if isinstance(x, dict) else x for x in self._queued]
        if self._skipped:
            lines.insert(
                0,
                note_line(
                    f"… {self._skipped} more events (the Trace view's filter finds them "
                    "in the last 5,000)"
                ),
            )
        self._queued.clear()
        self._skipped = 0
        self.write_lines(lines)

    def write_lines(self, lines: list[list[Part]]) -> None:
        """Append ``lines`` (the oldest drop out past MAX_LINES) and repaint once; the view
        stays on the newest line, or where it was when scrolled back."""
        if not lines:
            return
        full_before = len(self.lines)
        strips = [as_strip(parts) for parts in lines]
        self.lines.extend(strips)
        dropped = full_before + len(strips) - len(self.lines)
        self._widest = max(self._widest, *(s.cell_length for s in strips))
        self._resize()
        if self._follow:
            if not self._end_asked:  # one request however many writes (even hidden)
                self._end_asked = True
                self.call_after_refresh(self._to_end)
        elif dropped:  # what was shown moved up by that much
            self.scroll_to(y=max(0, self.scroll_offset.y - dropped), animate=False)
        self.refresh()

    def _to_end(self) -> None:
        """On the newest line, once laid out at the new size (RichLog's way)."""
        self._end_asked = False
        self.scroll_end(animate=False, immediate=True, x_axis=False)

    def _resize(self) -> None:
        size = Size(self._widest, len(self.lines))
        if size != self.virtual_size:  # a new size lays out the screen: only when it grew
            self.virtual_size = size

    def clear(self) -> None:
        """Empty the log (and what was waiting to be written)."""
        self._queued.clear()
        self._skipped = 0
        self.lines.clear()
        self._widest = 0
        self._resize()
        self.refresh()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        self._follow = round(new_value) >= self.max_scroll_y

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        row = scroll_y + y
        if row >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        return (
            self.lines[row]
            .crop_extend(scroll_x, scroll_x + width, None)
            .apply_style(self.rich_style)
        )

    def show(self, records: Iterable[dict[str, Any]]) -> None:
        """Clear and write the given history (a filter changed, the view is shown): the
        newest MAX_LINES of it, so the log starts full."""
        self.clear()
        self.held.clear()
        wanted = [rec for rec in records if self.wants(rec)]
        self.write_lines([line(rec) for rec in wanted[-MAX_LINES:]])

    def set_paused(self, paused: bool) -> int:
        """Pause or resume; on resume the held records are written. Returns how many."""
        self.paused = paused
        if paused:
            return 0
        held, self.held = self.held, []
        self.add(held)
        return len(held)
