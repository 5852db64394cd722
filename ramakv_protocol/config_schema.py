"""The daemon's config schema: each key's type, default, rule and doc, in one table.

The daemon's loader, the console's editor, the README's config table and the check of
config.example.toml all read :data:`KEYS` (the latter two: ramakv_protocol/config_docs.py).
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

Kind = Literal["bool", "int", "float", "str", "list", "tables"]
# A default as TOML reads it (lists as tuples: defaults are shared, so immutable).
Value = bool | int | float | str | tuple[str, ...]
StrCheck = Callable[[str], "str | None"]

DEFAULT_PATH = Path("/etc/ram-a-kv/config.toml")
ENV_PATH = "RAM_A_KV_CONFIG"


def config_path(cli_path: str | None = None) -> Path:
    """The daemon's lookup: --config, else $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml."""
    if cli_path:
        return Path(cli_path)
    env = os.environ.get(ENV_PATH)
    return Path(env) if env else DEFAULT_PATH


def url_problem(value: object) -> str | None:
    """Why ``value`` is not a usable http(s) base URL, or None when it is.

    The daemon's lmcache_url, its deployments' and the console's editor refuse the same
    URLs (``http://localhost:6999XYZ``: the port is not a number).
    """
    if not isinstance(value, str) or not value:
        return "must be an http:// or https:// URL such as http://localhost:6999"
    if any(c.isspace() or not c.isprintable() for c in value):
        return (
            "must be an http:// or https:// URL without spaces or control characters, "
            f"got {value!r}"
        )
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError as err:
        return f"is not a valid URL ({err}): {value!r}"
    if parts.scheme not in ("http", "https"):
        return f"must start with http:// or https://, got {value!r}"
    if not parts.hostname:
        return f"has no host name: {value!r}"
    if port == 0:
        return f"has port 0: {value!r}"
    if parts.query or parts.fragment or parts.username or parts.password:
        return f"must not carry a query, fragment or user info: {value!r}"
    return None


def listen_problem(value: str) -> str | None:
    """Why ``value`` is not a usable HOST:PORT for listen_addr, or None."""
    host, _, port = value.rpartition(":")
    if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        return f"must be HOST:PORT with a port in 1..65535, got {value!r}"
    return None


def path_problem(value: str) -> str | None:
    """Why ``value`` cannot name a file or folder, or None."""
    if not value or "\x00" in value:
        return "must be a file system path (not empty, no NUL)"
    return None


def optional_path_problem(value: str) -> str | None:
    """A path, or "" for none."""
    return None if value == "" else path_problem(value)


PG_SCHEMES = ("postgresql://", "postgres://")


def store_url_problem(value: str) -> str | None:
    """session_store_url: a PostgreSQL URL, or "" for the SQLite file."""
    if value and not value.startswith(PG_SCHEMES):
        return "must be a postgresql:// URL or '' (the SQLite file)"
    return None


BACKENDS = ("lmcache", "lmcache_mp")


def backend_problem(value: str) -> str | None:
    """backend: one of the adapters the factory builds."""
    return None if value in BACKENDS else f"must be one of {', '.join(BACKENDS)}, got {value!r}"


def nonempty_problem(value: str) -> str | None:
    """A name that must say something."""
    return None if value.strip() else "must not be empty"


def default_store_path() -> str:
    """/var/lib/ram-a-kv/sessions.db as root, else $XDG_STATE_HOME/ram-a-kv/sessions.db."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return "/var/lib/ram-a-kv/sessions.db"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(state) / "ram-a-kv" / "sessions.db")


def host_name() -> str:
    """node_id's default: this machine's host name."""
    return socket.gethostname()


@dataclass(frozen=True, slots=True)
class Key:
    """One top-level config key.

    Attributes:
        name: the TOML key (and the daemon's Config field).
        kind: its TOML type; "tables" is an array of tables the form does not edit.
        default: the value when the file does not set it (see ``factory``).
        doc: one line for the README table and the editor's help.
        zero_means: numbers only: 0 is allowed and means this ("no cap"); else a number
            must be positive.
        maximum: numbers only: the largest value allowed (a larger one is refused, never
            clamped).
        choices: str only: one of these (case-insensitive).
        check: str only: a format rule; returns why a value breaks it, or None.
        secret: never shown in logs, --check-config or the editor.
        factory: a default that depends on the host (computed when asked for).
        default_doc: how the README shows a host-dependent default.
        example: config.example.toml shows ``# name = example`` instead of the default.
    """

    name: str
    kind: Kind
    default: Value
    doc: str
    zero_means: str | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    check: StrCheck | None = None
    secret: bool = False
    factory: Callable[[], str] | None = None
    default_doc: str = ""
    example: Value | None = None

    def default_value(self) -> Value:
        """The default, computed for this host where it depends on it."""
        return self.factory() if self.factory is not None else self.default

    @property
    def editable(self) -> bool:
        """The console's form edits it (arrays of tables are kept as they are)."""
        return self.kind != "tables"


KEYS: tuple[Key, ...] = (
    # The original project's eight keys, so its config files keep working.
    Key(
        "listen_addr",
        "str",
        "127.0.0.1:6998",
        "HOST:PORT the daemon binds; a non-loopback address needs `auth_token`",
        check=listen_problem,
    ),
    Key(
        "lmcache_url",
        "str",
        "http://localhost:6999",
        "LMCache memory API the daemon steers (ignored with `noop_backend`)",
        check=url_problem,
    ),
    Key("debug_enabled", "bool", False, "write a debug file per turn_end"),
    Key("debug_dir", "str", "kvcache_debug", "where debug files go", check=path_problem),
    Key("noop_backend", "bool", False, "steer nothing (no LMCache calls)"),
    # The stock stack (docs/stock-stack.md): lmcache's own multiprocess server at lmcache_url
    # (its --http-port), steered through its /cache routes instead of ascend_ext's /memory.
    Key(
        "backend",
        "str",
        "lmcache",
        "`lmcache`: ascend_ext's memory API; `lmcache_mp`: the stock LMCache multiprocess "
        "server's HTTP API (docs/stock-stack.md)",
        check=backend_problem,
    ),
    Key(
        "model_name",
        "str",
        "",
        "`lmcache_mp` only: vLLM's `--model` string, the server's key (not "
        "`--served-model-name`); required there",
    ),
    Key("world_size", "int", 1, "`lmcache_mp` only: the engine's world size (one key per rank)"),
    Key("cache_salt", "str", "", "`lmcache_mp` only: the requests' `cache_salt` (usually none)"),
    # The stock server's fs L2 has no capacity limit, eviction or listing: the daemon, on
    # the same node, reads its folder and keeps it within a budget (docs/stock-stack.md).
    Key(
        "lmcache_mp_l2_path",
        "str",
        "",
        "`lmcache_mp` only: the stock server's fs L2 folder on this node (its "
        "`--l2-adapter` `base_path`), for the disk budget and `ramakv-admin l2-report`",
        check=optional_path_problem,
        example="/var/lib/lmcache/l2",
    ),
    Key(
        "l2_budget_bytes",
        "int",
        0,
        "disk budget of that folder for this deployment's model: over it, dead chunks (no "
        "session or fork names them) are deleted, oldest first; referenced ones never",
        zero_means="no budget (nothing deleted by the daemon)",
        example=500 * 1024**3,
    ),
    Key(
        "l2_check_interval_s",
        "float",
        60.0,
        "how often the daemon measures that folder against `l2_budget_bytes` (seconds)",
    ),
    Key("trace_events", "bool", False, "log every session's chunks and refcounts after each event"),
    Key(
        "session_store_path",
        "str",
        "",
        "SQLite file holding every session",
        check=path_problem,
        factory=default_store_path,
        default_doc="`/var/lib/ram-a-kv/sessions.db` (root) or "
        "`$XDG_STATE_HOME/ram-a-kv/sessions.db`",
        example="/var/lib/ram-a-kv/sessions.db",
    ),
    Key("turn_start_prefetch", "bool", True, "turn_start prefetches the session's chunks"),
    # Ours:
    Key("max_hashes_per_event", "int", 1000, "most chunk hashes in one event"),
    Key("max_hash_bytes", "int", 100, "longest chunk hash accepted (UTF-8 bytes)"),
    Key("max_body_bytes", "int", 8 * 1024 * 1024, "largest request body; larger gets HTTP 413"),
    Key(
        "trace_buffer",
        "int",
        10000,
        "trace records kept for `/trace?since=` replay",
        zero_means="keep none (a reconnect gets a fresh snapshot)",
    ),
    Key(
        "trace_buffer_bytes",
        "int",
        64 * 1024 * 1024,
        "bytes of JSON the replay ring keeps at most (oldest dropped first)",
    ),
    Key(
        "trace_queue",
        "int",
        1000,
        "per-subscriber queue; a subscriber this far behind is closed (code 4008)",
    ),
    Key("backend_timeout_s", "float", 5.0, "timeout of one LMCache call (seconds)"),
    Key(
        "evict_defer_s",
        "float",
        1.0,
        "a deferring cache (ascend_ext's memory API, 0..60 s) holds each delete this long "
        "and keeps a chunk referenced again meanwhile",
        zero_means="act at once",
        maximum=60.0,
    ),
    Key(
        "auth_token",
        "str",
        "",
        "bearer token required on every request when set",
        secret=True,
    ),
    Key(
        "max_sessions",
        "int",
        1_000_000,
        "live sessions kept at most; one more is refused",
        zero_means="no cap",
    ),
    Key("idempotency_window", "int", 10000, "`event_id` answers remembered"),
    Key("idempotency_ttl_s", "float", 3600.0, "how long an `event_id` answer is kept (seconds)"),
    Key(
        "sqlite_synchronous",
        "str",
        "NORMAL",
        "SQLite synchronous mode: NORMAL survives kill -9, FULL or EXTRA also power loss "
        "(an fsync per group commit)",
        choices=("NORMAL", "FULL", "EXTRA"),
    ),
    Key(
        "sqlite_commit_thread",
        "bool",
        False,
        "true: group commits run on the writer thread (slow or network disks); with NORMAL "
        "they run on the event loop (no fsync) and only WAL checkpoints use the thread; "
        "FULL/EXTRA always commit on the thread",
    ),
    # Forks (docs/forks.md):
    Key(
        "fork_hold_ttl_s",
        "float",
        86400.0,
        "a fork hold older than this (seconds) is released as its fork_end would be",
        zero_means="never",
    ),
    # Not 0, although the core reads 0 as "no limit": the limit bounds one session's memory.
    Key(
        "max_forks_per_session",
        "int",
        64,
        "open forks one session may have; one more is refused naming the limit",
    ),
    # Idle policies (docs/namespaces.md "Idle policies"): an agent's tool pause is seconds
    # to a minute, the hosted APIs' prompt caches keep a prefix 5 minutes: a session idle
    # that long is with its human, so its DDR goes to the live ones (a suspend keeps the
    # map and the chunks on disk; the next restore brings them back). A day without any
    # event is a conversation left for good: its disk copies are freed (as fork holds).
    Key(
        "idle_suspend_s",
        "float",
        300.0,
        "a session with no event for this long (seconds, from its stored last_event_ts) "
        "is suspended by the daemon; per deployment too",
        zero_means="never",
    ),
    Key(
        "idle_close_s",
        "float",
        86400.0,
        "a session with no event for this long (seconds; an idle suspend does not count) "
        "is closed by the daemon; per deployment too",
        zero_means="never",
    ),
    # Release semantics (docs/architecture.md "Release and retention"): a chunk no session
    # names is deleted only when dead by evidence. An hour covers a user's pause between
    # messages and a prompt prefix's reuse across conversations; the cache's own LRU still
    # evicts cold chunks first whenever it needs the room.
    Key(
        "retain_unreferenced_s",
        "float",
        3600.0,
        "a chunk no live or suspended session and no open fork names is deleted by the "
        "retention sweep once its last reference is this old (seconds); within it a chunk "
        "two sessions shared is not deleted by a close either. A restart counts the chunks "
        "its sessions name as referenced at the load",
        zero_means="delete dead chunks at once",
    ),
    # Namespaces and the DDR budget (docs/namespaces.md):
    Key(
        "evict_locations",
        "list",
        (),
        'tiers a refcount-zero chunk is deleted from, e.g. `["LocalCPUBackend"]`; '
        "`[]` = every tier",
    ),
    Key(
        "ddr_budget_chunks",
        "int",
        0,
        "DDR budget of the unnamed default namespace, in chunks",
        zero_means="no budget",
        example=200000,
    ),
    Key(
        "turn_in_flight_timeout_s",
        "float",
        600.0,
        "a turn_start without turn_end pins its session against demotion this long (seconds)",
        zero_means="a turn in flight never pins",
    ),
    Key(
        "budget_check_interval_s",
        "float",
        1.0,
        "at most one budget pass per namespace this often (seconds)",
        zero_means="a pass may run on every event",
    ),
    Key(
        "ready_max_evict_backlog",
        "int",
        100_000,
        "`GET /readyz` fails while more evictions than this wait",
        zero_means="no bound",
    ),
    # Scale-out (docs/scale-out.md); a secret: the URL may carry a password.
    Key(
        "session_store_url",
        "str",
        "",
        "`postgresql://user@host/db`: sessions in PostgreSQL, shared by the daemons of many "
        'nodes (the `postgres` extra, docs/scale-out.md); "" = the SQLite file',
        check=store_url_problem,
        secret=True,
    ),
    Key(
        "node_id",
        "str",
        "",
        "this daemon's node on a shared store: the owner of the sessions it serves",
        check=nonempty_problem,
        factory=host_name,
        default_doc="the host name",
        example="node-1",
    ),
    Key("postgres_pool_size", "int", 4, "connections in the PostgreSQL pool (plus one for LISTEN)"),
    Key(
        "ownership_check_s",
        "float",
        30.0,
        "on a shared store, how often (besides after each LISTEN reconnect) a node asks the "
        "database which of its sessions were taken or closed elsewhere, and releases them",
    ),
    Key(
        "deployments",
        "tables",
        (),
        "`[[deployments]]`: one table per model deployment, with its namespace, "
        "`lmcache_url`, budget and tiers ([docs/namespaces.md](docs/namespaces.md))",
    ),
)
BY_NAME: Mapping[str, Key] = {k.name: k for k in KEYS}
SECRET_KEYS = frozenset(k.name for k in KEYS if k.secret)


def _number_problem(key: Key, value: object, shown: str) -> str | None:
    problem = _sign_problem(key, value, shown)
    if (
        problem is None
        and key.maximum is not None
        and isinstance(value, int | float)
        and value > key.maximum
    ):
        return f"must be <= {key.maximum:g}, got {shown}"
    return problem


def _sign_problem(key: Key, value: object, shown: str) -> str | None:
    if key.kind == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            return f"must be an integer, got {shown}"
        bound = 0 if key.zero_means is not None else 1
        return None if value >= bound else f"must be >= {bound}, got {shown}"
    if not isinstance(value, int | float) or isinstance(value, bool):
        return f"must be a number, got {shown}"
    if not math.isfinite(value):
        return f"must be a finite number, got {shown}"
    if key.zero_means is not None:
        return None if value >= 0 else f"must be >= 0, got {shown}"
    return None if value > 0 else f"must be > 0, got {shown}"


def _str_problem(key: Key, value: object, shown: str) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, got {shown}"
    if key.choices and value.upper() not in key.choices:
        options = ", ".join(key.choices[:-1]) + " or " + key.choices[-1]
        return f"must be {options}, got {shown}"
    return key.check(value) if key.check is not None else None


def value_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not valid for config key ``name`` (type and rule), or None.

    The one check the daemon's loader and the console's editor apply to a key.
    """
    key = BY_NAME.get(name)
    if key is None:
        return f"unknown config key '{name}'"
    shown = "<hidden>" if key.secret else repr(value)  # never log a secret
    if key.kind == "bool":
        return None if isinstance(value, bool) else f"must be true or false, got {shown}"
    if key.kind in ("int", "float"):
        return _number_problem(key, value, shown)
    if key.kind == "str":
        return _str_problem(key, value, shown)
    if key.kind == "list":
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            return 'must be a list of tier names, e.g. ["LocalCPUBackend"]'
        return None
    if not isinstance(value, list | tuple) or not all(isinstance(v, dict) for v in value):
        return f"must be an array of tables ([[{name}]])"
    return None


def normalised(name: str, value: object) -> Value:
    """A valid ``value`` as the daemon keeps it: floats as float, lists as tuples.

    Raises ValueError naming the key when :func:`value_problem` finds one.
    """
    problem = value_problem(name, value)
    if problem is not None:
        raise ValueError(f"config key '{name}' {problem}")
    if BY_NAME[name].kind == "tables":  # e.g. [[deployments]]: the daemon parses each table
        raise TypeError(f"config key '{name}' is an array of tables, read by its own parser")
    if BY_NAME[name].kind == "float":
        assert isinstance(value, int | float)
        return float(value)
    if isinstance(value, list | tuple):
        return tuple(str(v) for v in value)
    assert isinstance(value, bool | int | float | str)
    return value


def toml_value(value: Value) -> str:
    """``value`` spelled as TOML (true, "text", [...])."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for what config keys hold
    return repr(value)
