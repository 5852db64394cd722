"""A scrollable event log: ok green, failed red; pause, filter, connection notes."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.widgets import RichLog

from ramakv_console.state import STATUS


def describe(rec: dict[str, Any]) -> str:
    """The part of a record after its type and session: data, error or effects."""
    if not rec.get("ok"):
        return f"error: {rec.get('error', '')}"
    parts = []
    data = rec.get("data") or {}
    if isinstance(data, dict) and "events" not in data:
        parts.append(" ".join(f"{k}={v}" for k, v in data.items()))
    for key in ("prefetch", "evict", "demote"):
        if rec.get(key):
            parts.append(f"{key}={len(rec[key])}")
    reason = (rec.get("notes") or {}).get("reason")
    if reason:  # who decided a lifecycle event and why (ramakv-proxy: tool_pause, idle...)
        parts.append(f"reason={reason}")
    return "  ".join(p for p in parts if p)


def line(rec: dict[str, Any]) -> Text:
    """One record as a coloured line."""
    if rec.get("kind") == STATUS:
        style = "bold green" if rec.get("connected") else "bold white on red"
        word = "trace connected" if rec.get("connected") else "connection lost"
        detail = rec.get("detail", "")
        if detail and detail != "connected":
            word += f": {detail}"
        return Text(f"──── {word} ────", style=style)
    stamp = time.strftime("%H:%M:%S", time.localtime(rec.get("ts") or 0))
    ok = bool(rec.get("ok"))
    text = Text()
    text.append(f"{rec.get('seq', ''):>7} {stamp} ", style="dim")
    text.append("ok  " if ok else "FAIL", style="bold green" if ok else "bold red")
    text.append(f" {rec.get('type', '?'):<18}", style="bold")
    text.append(f" {rec.get('session_id') or '-':<20} ")
    text.append(describe(rec), style="" if ok else "red")
    return text


PER_BATCH = 12  # lines written per applied batch (10 batches a second)
REDRAW_LINES = 200  # lines written when the log is redrawn (filter change, view shown)


class TraceLog(RichLog):
    """Appends trace records; while paused new ones wait and are written on resume."""

    def __init__(self, session_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(max_lines=5000, wrap=False, markup=False, **kwargs)
        self.session_id = session_id
        self.filter_text = ""
        self.failed_only = False
        self.paused = False
        self.held: list[dict[str, Any]] = []

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
        """Write new records (or hold them while paused); of a large batch only the newest
        PER_BATCH are written (nobody reads 1,000 lines a second; writing them would
        delay the keys)."""
        if self.paused:
            self.held.extend(records)
            del self.held[: max(0, len(self.held) - (self.max_lines or 5000))]
            return
        wanted = [rec for rec in records if self.wants(rec)]
        if len(wanted) > PER_BATCH:
            self.note(
                f"… {len(wanted) - PER_BATCH} more events (the Trace view's filter "
                "finds them in the last 5,000)"
            )
            wanted = wanted[-PER_BATCH:]
        for rec in wanted:
            self.write(line(rec))

    def note(self, text: str) -> None:
        """A dim line of the console's own (e.g. how many records a burst skipped)."""
        self.write(Text(text, style="dim italic"))

    def show(self, records: Iterable[dict[str, Any]]) -> None:
        """Clear and write the given history (a filter changed)."""
        self.clear()
        self.held.clear()
        wanted = [rec for rec in records if self.wants(rec)]
        for rec in wanted[-REDRAW_LINES:]:
            self.write(line(rec))

    def set_paused(self, paused: bool) -> int:
        """Pause or resume; on resume the held records are written. Returns how many."""
        self.paused = paused
        if paused:
            return 0
        held, self.held = self.held, []
        self.add(held)
        return len(held)
