"""Read, validate, diff and atomically write the daemon's and the SDK's TOML config files.

Written with tomli-w: values and unknown keys survive a round trip, comments do not.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tomli_w

DEFAULT_DAEMON_CONFIG = Path("/etc/ram-a-kv/config.toml")
ENV_CONFIG = "RAM_A_KV_CONFIG"
COMMENTS_SURVIVE = False  # tomli-w writes plain TOML; comments in the old file are lost


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One editable key: its kind, default and a line of help."""

    name: str
    kind: str  # str | bool | int | float | addr | url | path | secret | choice:A,B,C
    default: Any
    help: str


def _default_store() -> str:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return "/var/lib/ram-a-kv/sessions.db"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(state) / "ram-a-kv" / "sessions.db")


# The daemon's keys (mirrors ramakv_daemon/config.py, which the console must not import).
DAEMON_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("listen_addr", "addr", "127.0.0.1:6998", "HOST:PORT the daemon binds"),
    FieldSpec("lmcache_url", "url", "http://localhost:6999", "LMCache memory API base URL"),
    FieldSpec("debug_enabled", "bool", False, "write per-turn debug files"),
    FieldSpec("debug_dir", "path", "kvcache_debug", "where debug files go"),
    FieldSpec("noop_backend", "bool", False, "steer nothing (no LMCache calls)"),
    FieldSpec("trace_events", "bool", False, "log the whole state after every event"),
    FieldSpec("session_store_path", "path", _default_store(), "SQLite session store"),
    FieldSpec("turn_start_prefetch", "bool", True, "prefetch on turn_start"),
    FieldSpec("max_hashes_per_event", "int", 1000, "largest chunk list accepted"),
    FieldSpec("max_hash_bytes", "int", 100, "longest chunk hash accepted"),
    FieldSpec("max_body_bytes", "int", 8 * 1024 * 1024, "largest request body"),
    FieldSpec("trace_buffer", "int", 10000, "trace records kept for ?since= replay"),
    FieldSpec(
        "trace_buffer_bytes",
        "int",
        64 * 1024 * 1024,
        "bytes of trace records kept for replay (oldest dropped first)",
    ),
    FieldSpec("trace_queue", "int", 1000, "per-subscriber queue before it is dropped"),
    FieldSpec("backend_timeout_s", "float", 5.0, "LMCache call timeout (seconds)"),
    FieldSpec(
        "evict_defer_s",
        "float",
        1.0,
        "a deferring cache holds each delete this long; a re-reference keeps it",
    ),
    FieldSpec("auth_token", "secret", "", "bearer token (needed for a non-loopback bind)"),
    FieldSpec("max_sessions", "int", 1_000_000, "most live sessions accepted"),
    FieldSpec("idempotency_window", "int", 10000, "event ids remembered for de-duplication"),
    FieldSpec("idempotency_ttl_s", "float", 3600.0, "how long an event id is remembered (s)"),
    FieldSpec(
        "sqlite_synchronous",
        "choice:NORMAL,FULL,EXTRA",
        "NORMAL",
        "SQLite synchronous mode: NORMAL, FULL or EXTRA",
    ),
    FieldSpec(
        "sqlite_commit_thread",
        "bool",
        False,
        "group commits on the writer thread (slow or network disks; always so with FULL/EXTRA)",
    ),
    FieldSpec(
        "evict_locations",
        "list",
        [],
        "tiers a refcount-zero chunk is deleted from, comma-separated (empty = every tier)",
    ),
    FieldSpec(
        "ddr_budget_chunks", "count", 0, "DDR budget of the default namespace in chunks (0 = none)"
    ),
    FieldSpec(
        "turn_in_flight_timeout_s",
        "float",
        600.0,
        "a turn_start without turn_end stops protecting its session after this long (s)",
    ),
    FieldSpec(
        "budget_check_interval_s",
        "float0",
        1.0,
        "at most one budget pass per namespace this often (s)",
    ),
    FieldSpec(
        "fork_hold_ttl_s",
        "float0",
        86400.0,
        "a fork hold older than this is released as its fork_end would be (s; 0 = never)",
    ),
    FieldSpec("max_forks_per_session", "int", 64, "most open forks one session may have"),
    FieldSpec(
        "ready_max_evict_backlog",
        "count",
        100_000,
        "GET /readyz fails while more evictions wait (0 = no bound)",
    ),
    # A secret: the URL may carry a password (docs/scale-out.md).
    FieldSpec(
        "session_store_url",
        "secret",
        "",
        "postgresql:// URL of a store shared by many nodes ('' = the SQLite file)",
    ),
    FieldSpec(
        "node_id",
        "str",
        socket.gethostname(),
        "this daemon's node: the owner of its sessions on a shared store",
    ),
    FieldSpec("postgres_pool_size", "int", 4, "PostgreSQL pool connections (plus one for LISTEN)"),
    FieldSpec(
        "ownership_check_s",
        "float",
        30.0,
        "how often a node checks which of its sessions were taken or closed elsewhere",
    ),
)
# Keys the form does not edit but every save keeps as they are: [[deployments]] tables
# (edit them in the file; docs/namespaces.md).
KEPT_AS_IS = frozenset({"deployments"})
SDK_FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(
        "daemon_url",
        "url",
        "http://127.0.0.1:6998",
        "where SDK clients and the console find the daemon",
    ),
)
# The daemon reads its config once at start-up: every change takes effect on restart.
RESTART_KEYS = frozenset(f.name for f in DAEMON_FIELDS)


def daemon_config_path(cli_path: str | None = None) -> Path:
    """The daemon's lookup: --config, else $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml."""
    if cli_path:
        return Path(cli_path)
    env = os.environ.get(ENV_CONFIG)
    return Path(env) if env else DEFAULT_DAEMON_CONFIG


def sdk_config_path() -> Path:
    """~/.config/ram-a-kv/config.toml (XDG_CONFIG_HOME respected)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ram-a-kv" / "config.toml"


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


def parse_value(spec: FieldSpec, text: str) -> Any:
    """Turn the form's text into a typed value, or raise ValueError with a readable reason."""
    t = text.strip()
    kind = spec.kind
    if kind == "bool":
        if t.lower() in ("true", "yes", "on", "1"):
            return True
        if t.lower() in ("false", "no", "off", "0"):
            return False
        raise ValueError(f"{spec.name}: expected true or false")
    if kind == "int":
        try:
            n = int(t)
        except ValueError:
            raise ValueError(f"{spec.name}: expected a whole number") from None
        if n <= 0:
            raise ValueError(f"{spec.name}: must be greater than 0")
        return n
    if kind == "count":
        if not t.isdigit():
            raise ValueError(f"{spec.name}: expected a whole number, 0 or more")
        return int(t)
    if kind in ("float", "float0"):
        try:
            x = float(t)
        except ValueError:
            raise ValueError(f"{spec.name}: expected a number") from None
        if x < 0 or (x == 0 and kind == "float"):
            raise ValueError(f"{spec.name}: must be greater than 0")
        return x
    if kind == "list":
        items = [p.strip() for p in t.split(",") if p.strip()]
        if any(not p.isidentifier() for p in items):
            raise ValueError(
                f"{spec.name}: expected tier names like LocalCPUBackend, comma-separated"
            )
        return items
    if kind == "addr":
        host, _, port = t.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{spec.name}: expected HOST:PORT, e.g. 127.0.0.1:6998")
        return t
    if kind == "url":
        problem = url_problem(t)
        if problem:
            raise ValueError(f"{spec.name}: {problem}")
        return t
    if kind == "path":
        if not t or "\x00" in t:
            raise ValueError(f"{spec.name}: expected a file system path")
        return t
    if kind.startswith("choice:"):
        options = kind.split(":", 1)[1].split(",")
        if t.upper() not in options:
            raise ValueError(f"{spec.name}: expected one of {', '.join(options)}")
        return t.upper()
    return text  # str / secret: taken as typed


def url_problem(text: str) -> str | None:
    """Why ``text`` is not an http(s) base URL with a host and a valid port, or None.

    The console cannot import the daemon's config module, so it checks the same things
    itself: scheme, host, a numeric port from 1 to 65535, no stray characters.
    """
    try:
        u = urlsplit(text)
        port = u.port  # ValueError for "6999XYZ" or 70000
    except ValueError as err:
        return f"not a valid URL ({err})"
    if u.scheme not in ("http", "https"):
        return "expected an http:// or https:// URL"
    if not u.hostname:
        return "the URL has no host"
    if port == 0:
        return "port must be from 1 to 65535"
    if any(c.isspace() for c in text) or u.query or u.fragment:
        return "expected a base URL like http://localhost:6999 (no spaces, query or #)"
    return None


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
