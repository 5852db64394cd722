"""How each event field is entered in the fire-event form, and turning the form into JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

HASH_LIST_FIELDS = frozenset({"chunk_hashes", "kv_transfer_params"})
BOOL_FIELDS = frozenset({"dry_run", "force"})
INT_FIELDS = frozenset({"limit", "offset", "fork_id"})
TEXT_FIELDS = frozenset(
    {"session_id", "source_session_id", "state", "idempotency_key", "namespace"}
)


@dataclass(frozen=True, slots=True)
class FieldInput:
    """One form field: its name, how it is typed in, and whether it is required."""

    name: str
    kind: str  # "text" | "hashes" | "bool" | "int" | "json"
    required: bool

    @property
    def hint(self) -> str:
        """Placeholder text for the field."""
        return {
            "text": "text",
            "hashes": "one chunk hash per line (or a JSON object)",
            "bool": "",
            "int": "a whole number",
            "json": 'JSON, e.g. {"key": "value"}',
        }[self.kind]


def field_kind(name: str) -> str:
    """The input kind for a field name (unknown names take JSON)."""
    if name in HASH_LIST_FIELDS:
        return "hashes"
    if name in BOOL_FIELDS:
        return "bool"
    if name in INT_FIELDS:
        return "int"
    if name in TEXT_FIELDS or name.endswith("_id"):
        return "text"
    return "json"


def form_fields(spec: dict[str, Any]) -> list[FieldInput]:
    """Required fields first, then optional ones, from a list_events entry."""
    req = [str(n) for n in spec.get("required") or []]
    opt = [str(n) for n in spec.get("optional") or [] if n not in req]
    return [FieldInput(n, field_kind(n), True) for n in req] + [
        FieldInput(n, field_kind(n), False) for n in opt
    ]


def parse_hashes(text: str) -> list[str]:
    """One hash per line; blank lines and surrounding spaces ignored."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def build_event(
    event_type: str, fields: list[FieldInput], values: dict[str, Any]
) -> dict[str, Any]:
    """The event object to POST; ValueError naming the field when a value is invalid.

    Empty optional fields are left out; an empty required field is an error (the
    daemon would say so too, but the form says it before sending).
    """
    event: dict[str, Any] = {"type": event_type}
    for f in fields:
        raw = values.get(f.name)
        if f.kind == "bool":
            if raw or f.required:
                event[f.name] = bool(raw)
            continue
        text = "" if raw is None else str(raw)
        if not text.strip():
            if f.required:
                raise ValueError(f"{f.name} is required")
            continue
        if f.kind == "text":
            event[f.name] = text.strip()
        elif f.kind == "int":
            try:
                event[f.name] = int(text.strip())
            except ValueError:
                raise ValueError(f"{f.name} must be a whole number") from None
        elif f.kind == "hashes":
            if text.lstrip().startswith("{"):
                event[f.name] = _json(f.name, text)
            else:
                hashes = parse_hashes(text)
                event[f.name] = (
                    {"chunk_hashes": hashes} if f.name == "kv_transfer_params" else hashes
                )
        else:
            event[f.name] = _json(f.name, text)
    return event


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{name}: invalid JSON ({err.msg} at line {err.lineno} column {err.colno})"
        ) from None
