"""An editable form over the config schema's keys, with a validation message per key."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Input, Label, Static, Switch

from ramakv_console.config_io import FieldSpec, format_value, parse_value


class ConfigForm(VerticalScroll):
    """One row per key: label with help, an Input or Switch, and an error line."""

    DEFAULT_CSS = """
    ConfigForm { height: 1fr; }
    ConfigForm .cfg-label { margin-top: 1; }
    ConfigForm .cfg-error { color: $error; height: auto; }
    """

    def __init__(self, specs: tuple[FieldSpec, ...], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.specs = specs
        self.prefix = kwargs.get("id") or "cfg"

    def compose(self) -> Any:
        for s in self.specs:
            shown = format_value(s.default) or '""'
            help_text = escape(f"{s.help.replace('`', '')} (default {shown})")
            yield Label(f"[b]{s.name}[/b]  [dim]{help_text}[/dim]", classes="cfg-label")
            yield self._input(s)
            yield Static("", id=f"{self.prefix}-err-{s.name}", classes="cfg-error")

    def _input(self, s: FieldSpec) -> Widget:
        wid = f"{self.prefix}-in-{s.name}"
        if s.kind == "bool":
            return Switch(value=bool(s.default), id=wid)
        return Input(value=format_value(s.default), id=wid, password=s.secret)

    def fill(self, data: dict[str, Any]) -> None:
        """Show the file's values (defaults for keys it does not set)."""
        for s in self.specs:
            value = data.get(s.name, s.default)
            w = self.query_one(f"#{self.prefix}-in-{s.name}")
            if isinstance(w, Switch):
                w.value = bool(value)
            elif isinstance(w, Input):
                w.value = format_value(value)

    def read(self) -> tuple[dict[str, Any], list[str]]:
        """Typed values and the validation errors (each also shown under its field)."""
        values: dict[str, Any] = {}
        errors: list[str] = []
        for s in self.specs:
            w = self.query_one(f"#{self.prefix}-in-{s.name}")
            err = self.query_one(f"#{self.prefix}-err-{s.name}", Static)
            if isinstance(w, Switch):
                values[s.name] = w.value
                err.update("")
                continue
            assert isinstance(w, Input)
            try:
                values[s.name] = parse_value(s, w.value)
                err.update("")
            except ValueError as e:
                errors.append(str(e))
                err.update(escape(str(e)))  # the value typed is quoted in it
        return values, errors
