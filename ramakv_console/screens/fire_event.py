"""Fire any event: a form built from list_events; the daemon's answer shown as it came back."""

from __future__ import annotations

import json
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Input, Label, Select, Static, Switch, TextArea

from ramakv_console.context import Catalogue, ConsoleContext
from ramakv_console.messages import Daemon
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.event_form import EventForm
from ramakv_console.widgets.key_bar import KeyBar


class FireEventScreen(Screen[None]):
    """Pick an event type, fill its fields, send it."""

    BINDINGS = [
        Binding("ctrl+s", "send", "Send", priority=True),
        Binding("ctrl+l", "reload", "Reload event list"),
        Binding("escape", "leave_field", "Leave field", show=False),
    ]

    def __init__(self, ctx: ConsoleContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.prefill: dict[str, Any] = {}
        self._filled_from: Catalogue | None = None  # the catalogue the select shows

    def compose(self) -> ComposeResult:
        yield ConnectionBanner(self.ctx, id="banner")
        with Horizontal(id="fire"):
            with Vertical(id="fire-left"):
                yield Select[str]([], prompt="event type", id="event-type")
                yield Static("", id="event-description")
                yield EventForm(id="event-form")
                yield Static("", id="form-error")
                yield Button("Send (ctrl+s)", id="send", variant="primary")
            with Vertical(id="fire-right"):
                yield Label("Answer", classes="section")
                yield Static("(nothing sent yet)", id="answer", markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        self.sub_title = "Fire an event"
        self.ctx.catalogue_loaded.subscribe(self, self._fill_types, immediate=True)
        self._fill_types(self.ctx.catalogue)

    def _fill_types(self, catalogue: Catalogue) -> None:
        select = self.query_one("#event-type", Select)
        current = select.value
        admin = catalogue.admin
        # The nine contract events first, then the admin ones (labelled).
        names = sorted(catalogue.events, key=lambda n: (n in admin, n))
        # A reload of the same catalogue (every reconnect loads it) leaves the select alone:
        # set_options resets its value, and picking it again rebuilt the form, wiping
        # what was typed in it.
        if catalogue == self._filled_from:
            return
        self._filled_from = catalogue
        select.set_options((f"{n} (admin)" if n in admin else n, n) for n in names)
        if isinstance(current, str) and current in catalogue.events:
            select.value = current
        elif "turn_end" in catalogue.events and not isinstance(current, str):
            select.value = "turn_end"

    async def choose(self, event_type: str, **values: Any) -> None:
        """Select ``event_type`` and prefill fields (used by 'e' on a session)."""
        self.prefill = values
        select = self.query_one("#event-type", Select)
        if event_type in self.ctx.catalogue.events:
            if select.value == event_type:
                await self._load(event_type)
            else:
                select.value = event_type

    async def on_select_changed(self, event: Select.Changed) -> None:
        if isinstance(event.value, str):
            await self._load(event.value)
            if self.focused is event.select or self.focused is None:
                self.focus_first_field()  # typing goes into the form, not to the view keys

    def focus_first_field(self) -> None:
        """Focus the form's first field (after picking a type or prefilling)."""
        fields = list(self.query_one(EventForm).query("Input, TextArea, Switch"))
        prefilled = self.prefill.keys()
        for w in fields:
            if isinstance(w, Input | TextArea | Switch) and (w.id or "")[6:] not in prefilled:
                w.focus()
                return
        if fields:
            fields[0].focus()

    def action_leave_field(self) -> None:
        """Escape: out of the field to the type picker, where the view keys work again."""
        self.query_one("#event-type", Select).focus()

    def on_screen_resume(self) -> None:
        if self.focused is None:
            self.query_one("#event-type", Select).focus()

    async def _load(self, event_type: str) -> None:
        spec = self.ctx.catalogue.events.get(event_type, {})
        self.query_one("#event-description", Static).update(
            f"[b]{event_type}[/b]: {spec.get('description', '')}"
        )
        form = self.query_one(EventForm)
        await form.load(event_type, spec)
        for name, value in self.prefill.items():
            if value is not None:
                form.set_value(name, value)
        self.query_one("#form-error", Static).update("")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "send":
            self.action_send()

    def action_send(self) -> None:
        form = self.query_one(EventForm)
        error = self.query_one("#form-error", Static)
        if not form.event_type:
            error.update("[red]Pick an event type first[/red]")
            return
        try:
            event = form.event()
        except ValueError as err:
            error.update(f"[red]{err}[/red]")
            return
        error.update("")
        self.send(event)

    @work(exclusive=True, group="fire")
    async def send(self, event: dict[str, Any]) -> None:
        """POST the event and show the envelope verbatim."""
        answer = self.query_one("#answer", Static)
        answer.update(f"sending {json.dumps(event)} …")
        envelope = await self.ctx.send(event)
        answer.set_classes("answer-ok" if envelope.get("ok") else "answer-failed")
        answer.update(
            "request:\n"
            + json.dumps(event, indent=2)
            + "\n\nanswer:\n"
            + json.dumps(envelope, indent=2)
        )

    def action_reload(self) -> None:
        self.post_message(Daemon.ReloadCatalogue())
