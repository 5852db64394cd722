"""Read, validate, diff and atomically write the daemon's and the SDK's TOML config files.

Written with tomli-w: values and unknown keys survive a round trip, comments do not.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import tomli_w

from ramakv_protocol import config_schema as schema
from ramakv_protocol.config_schema import url_problem
from ramakv_sdk import config as sdk_config

COMMENTS_SURVIVE = False  # tomli-w writes plain TOML; comments in the old file are lost


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One editable key: its kind, default, a line of help and the rule its value obeys."""

    name: str
    kind: schema.Kind
    default: Any  # TOML-ready: a list, never a tuple, so it compares equal to the form's
    help: str
    problem: Callable[[Any], str | None]  # why a typed value is refused, or None
    secret: bool = False
    choices: tuple[str, ...] = ()


def _daemon_field(key: schema.Key) -> FieldSpec:
    default = key.default_value()
    return FieldSpec(
        key.name,
        key.kind,
        list(default) if isinstance(default, tuple) else default,
        key.doc + (f" (0 = {key.zero_means})" if key.zero_means else ""),
        partial(schema.value_problem, key.name),
        key.secret,
        key.choices,
    )


# The daemon's keys, from the schema it loads its config with (ramakv_protocol).
DAEMON_FIELDS: tuple[FieldSpec, ...] = tuple(_daemon_field(k) for k in schema.KEYS if k.editable)
# Keys the form does not edit but every save keeps as they are: [[deployments]] tables
# (edit them in the file; docs/namespaces.md).
KEPT_AS_IS = frozenset(k.name for k in schema.KEYS if not k.editable)


def _string_problem(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be a string"


# The SDK's config file (ramakv_sdk.config reads it): where clients find the daemon.
SDK_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(
        "daemon_url",
        "str",
        sdk_config.DEFAULT_DAEMON_URL,
        "where SDK clients and the console find the daemon",
        url_problem,
    ),
    FieldSpec(
        "auth_token",
        "str",
        "",
        "the daemon's bearer token, sent to daemon_url only",
        _string_problem,
        secret=True,
    ),
)
# The daemon reads its config once at start-up: every change takes effect on restart.
RESTART_KEYS = frozenset(f.name for f in DAEMON_FIELDS)
# The daemon's lookup: --config, else $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml.
daemon_config_path = schema.config_path
# The SDK's: $XDG_CONFIG_HOME/ram-a-kv/config.toml, XDG_CONFIG_HOME defaulting to ~/.config.
sdk_config_path = sdk_config.config_path


def load(path: Path) -> dict[str, Any]:
    """The file's top-level table; {} when it does not exist. Raises ValueError if not TOML."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path} is not valid TOML: {err}") from err


def _typed(spec: FieldSpec, text: str) -> Any:
    t = text.strip()
    if spec.kind == "bool":
        if t.lower() in ("true", "yes", "on", "1"):
            return True
        if t.lower() in ("false", "no", "off", "0"):
            return False
        raise ValueError(f"{spec.name}: expected true or false")
    if spec.kind == "int":
        try:
            return int(t)
        except ValueError:
            raise ValueError(f"{spec.name}: expected a whole number") from None
    if spec.kind == "float":
        try:
            return float(t)
        except ValueError:
            raise ValueError(f"{spec.name}: expected a number") from None
    if spec.kind == "list":
        return [p.strip() for p in t.split(",") if p.strip()]
    if spec.secret:
        return text  # taken as typed
    return t.upper() if spec.choices else t


def parse_value(spec: FieldSpec, text: str) -> Any:
    """Turn the form's text into a typed value the schema accepts, or raise ValueError
    naming the key and the schema's reason."""
    value = _typed(spec, text)
    problem = spec.problem(value)
    if problem is not None:
        raise ValueError(f"{spec.name}: {problem}")
    return value


def toml_text(value: Any) -> str:
    """A value as TOML writes it (true, not True; quoted strings)."""
    if value is None:
        return "(unset)"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).split("=", 1)[1].strip()


def format_value(value: Any) -> str:
    """A value as the form shows it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class Diff:
    """One changed key."""

    key: str
    old: Any
    new: Any
    needs_restart: bool

    def line(self) -> str:
        """'- key = old' / '+ key = new' lines for the review dialog."""
        note = "  [restart needed]" if self.needs_restart else ""
        return f"{self.key}: {toml_text(self.old)} -> {toml_text(self.new)}{note}"


def merge(
    original: dict[str, Any], edits: dict[str, Any], specs: tuple[FieldSpec, ...]
) -> tuple[dict[str, Any], list[Diff]]:
    """``original`` with ``edits`` applied; unknown keys and tables kept in place.

    A key left unset in the file and edited to its default stays unset.
    """
    defaults = {s.name: s.default for s in specs}
    restart = RESTART_KEYS if specs is DAEMON_FIELDS else frozenset()
    merged = dict(original)
    diffs: list[Diff] = []
    for key, value in edits.items():
        old = original.get(key)
        if key not in original and value == defaults.get(key):
            continue
        if old == value and key in original:
            continue
        merged[key] = value
        diffs.append(Diff(key, old, value, key in restart))
    return merged, diffs


def write_atomic(path: Path, data: dict[str, Any]) -> Path | None:
    """Write ``data`` as TOML: temp file in the same folder, fsync, keep ``.bak``, rename.

    Returns the backup's path, or None when there was no old file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = tomli_w.dumps(data).encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        backup: Path | None = None
        if path.exists():
            backup = path.with_name(path.name + ".bak")
            shutil.copy2(path, backup)
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return backup
