"""The footer: the view keys and `? Help` first, then as many of the screen's keys as fit.

Textual's Footer lists the screen's bindings before the app's, so at 80 columns the view
keys and Help were the ones cut off; this bar never drops them.
"""

from __future__ import annotations

from rich.text import Text
from textual.dom import NoScreen
from textual.widgets import Static

VIEW_KEYS = (
    ("1", "Sessions"),
    ("2", "Refcounts"),
    ("3", "Trace"),
    ("4", "Fire"),
    ("5", "Config"),
    ("?", "Help"),
)


def key_text(key: str) -> str:
    """A binding's key as the bar shows it."""
    return {
        "slash": "/",
        "space": "space",
        "escape": "esc",
        "question_mark": "?",
        "enter": "enter",
        "ctrl+s": "^s",
        "ctrl+l": "^l",
        "ctrl+o": "^o",
    }.get(key, key)


class KeyBar(Static):
    """One line of keys, fitted to the width."""

    DEFAULT_CSS = "KeyBar { height: 1; dock: bottom; background: $panel; }"

    def on_mount(self) -> None:
        self.watch(self.screen, "focused", self._focus_moved)
        self.call_after_refresh(self.redraw)

    def _focus_moved(self, _focused: object) -> None:
        self.call_after_refresh(self.redraw)

    def on_resize(self) -> None:
        self.redraw()

    def pairs(self) -> list[tuple[str, str]]:
        """The screen's own shown keys (focused widget first), without the view keys."""
        seen: set[str] = {k for k, _ in VIEW_KEYS}
        out: list[tuple[str, str]] = []
        for key, active in self.screen.active_bindings.items():
            b = active.binding
            if not b.show or not b.description or active.node is self.app:
                continue
            shown = key_text(key)
            if shown in seen:
                continue
            seen.add(shown)
            out.append((shown, b.description))
        return out

    def redraw(self) -> None:
        if not self.is_attached or not self.is_mounted:
            return
        try:
            _ = self.screen
        except NoScreen:  # detached between the request and the call (a mode switch)
            return
        width = max(self.size.width, 20)
        line = Text(no_wrap=True, overflow="crop")

        def add(key: str, what: str) -> None:
            line.append(f" {key} ", style="bold reverse")
            line.append(f" {what} ")

        for key, what in VIEW_KEYS:
            add(key, what)
        line.append("│")
        for key, what in self.pairs():
            if line.cell_len + len(key) + len(what) + 4 > width:
                break
            add(key, what)
        self.update(line)
