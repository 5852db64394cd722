"""A modal question with a list of lines and a row of buttons; dismisses with the choice."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static
from textual.widgets.button import ButtonVariant


class ConfirmDialog(ModalScreen[str | None]):
    """Shows ``title`` and ``lines``; returns the id of the button pressed (None on escape)."""

    BINDINGS = [Binding("escape", "dismiss_none", "Cancel")]

    def __init__(
        self,
        title: str,
        lines: list[str],
        buttons: list[tuple[str, str, ButtonVariant]],
        **kwargs: Any,
    ) -> None:
        """``buttons`` is a list of (id, label, variant)."""
        super().__init__(**kwargs)
        self.title_text = title
        self.lines = lines
        self.buttons = buttons

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.title_text, id="dialog-title")
            with VerticalScroll(id="dialog-body"):
                yield Static("\n".join(self.lines) or "(nothing)", markup=False)
            with Horizontal(id="dialog-buttons"):
                for bid, label, variant in self.buttons:
                    yield Button(label, id=bid, variant=variant)

    def on_mount(self) -> None:
        self.query(Button).last().focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
