"""The fields of one event type, built from its list_events entry."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, Label, Switch, TextArea

from ramakv_console.event_fields import FieldInput, build_event, form_fields


class EventForm(VerticalScroll):
    """Label + input per field; required fields first and marked with *."""

    DEFAULT_CSS = """
    EventForm { height: 1fr; }
    EventForm .field-label { margin-top: 1; }
    EventForm TextArea { height: 6; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.event_type = ""
        self.fields: list[FieldInput] = []
        self._loading = asyncio.Lock()

    async def load(self, event_type: str, spec: dict[str, Any]) -> None:
        """Show the fields of ``event_type``. Loads run one after the other (picking a
        type while the default one is still being built must not mix their fields), and
        ``event_type`` names the form only once its fields are there."""
        async with self._loading:
            fields = form_fields(spec)
            await self.remove_children()
            widgets: list[Widget] = []
            if not fields:
                widgets.append(Label("This event takes no fields.", classes="field-label"))
            for f in fields:
                star = " *" if f.required else ""
                widgets.append(
                    Label(f"[b]{f.name}[/b]{star} [dim]{f.hint}[/dim]", classes="field-label")
                )
                widgets.append(self._input(f))
            await self.mount_all(widgets)
            self.fields = fields
            self.event_type = event_type

    @staticmethod
    def _input(f: FieldInput) -> Widget:
        wid = f"field-{f.name}"
        if f.kind == "bool":
            return Switch(value=False, id=wid)
        if f.kind in ("hashes", "json"):
            return TextArea(id=wid, soft_wrap=True, show_line_numbers=False)
        return Input(placeholder=f.hint, id=wid, type="integer" if f.kind == "int" else "text")

    def values(self) -> dict[str, Any]:
        """What is typed in each field."""
        out: dict[str, Any] = {}
        for f in self.fields:
            w = self.query_one(f"#field-{f.name}")
            if isinstance(w, Switch):
                out[f.name] = w.value
            elif isinstance(w, TextArea):
                out[f.name] = w.text
            elif isinstance(w, Input):
                out[f.name] = w.value
        return out

    def set_value(self, name: str, value: Any) -> None:
        """Fill a field (used to prefill session_id)."""
        for w in self.query(f"#field-{name}"):
            if isinstance(w, Switch):
                w.value = bool(value)
            elif isinstance(w, TextArea):
                w.text = str(value)
            elif isinstance(w, Input):
                w.value = str(value)

    def event(self) -> dict[str, Any]:
        """The event to send; ValueError naming the bad field."""
        return build_event(self.event_type, self.fields, self.values())
