"""Daemon configuration: TOML top-level keys -> a frozen dataclass, with safe defaults."""

from __future__ import annotations

import logging
import os
import socket
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ramakv_daemon.deployments import Deployment, locations_of, parse_deployments
from ramakv_daemon.urls import url_problem

log = logging.getLogger("ramakv.config")

DEFAULT_CONFIG_PATH = Path("/etc/ram-a-kv/config.toml")
ENV_CONFIG = "RAM_A_KV_CONFIG"
SECRET_KEYS = frozenset({"auth_token", "session_store_url"})  # a URL may hold a password
PG_SCHEMES = ("postgresql://", "postgres://")


def default_store_path() -> str:
    """/var/lib/ram-a-kv/sessions.db as root, else $XDG_STATE_HOME/ram-a-kv/sessions.db."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return "/var/lib/ram-a-kv/sessions.db"
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(state) / "ram-a-kv" / "sessions.db")


@dataclass(frozen=True, slots=True)
class Config:
    """Every daemon setting; names match the original project's config keys."""

    listen_addr: str = "127.0.0.1:6998"
    lmcache_url: str = "http://localhost:6999"
    debug_enabled: bool = False
    debug_dir: str = "kvcache_debug"
    noop_backend: bool = False
    trace_events: bool = False
    session_store_path: str = field(default_factory=default_store_path)
    turn_start_prefetch: bool = True
    # Ours (not in the original):
    max_hashes_per_event: int = 1000
    max_hash_bytes: int = 100
    max_body_bytes: int = 8 * 1024 * 1024
    trace_buffer: int = 10000
    trace_buffer_bytes: int = 64 * 1024 * 1024  # the replay ring's bound in bytes of JSON
    trace_queue: int = 1000
    backend_timeout_s: float = 5.0
    # A cache that supports it (ascend_ext's memory API) holds each delete this long, and
    # a chunk referenced again meanwhile is kept (docs/reliability.md); 0 = act at once.
    evict_defer_s: float = 1.0
    auth_token: str = ""
    max_sessions: int = 1_000_000
    idempotency_window: int = 10000
    idempotency_ttl_s: float = 3600.0
    sqlite_synchronous: str = "NORMAL"
    sqlite_commit_thread: bool = False  # group commits on a thread (slow or network disks)
    # Namespaces and the DDR budget (docs/namespaces.md):
    deployments: tuple[Deployment, ...] = ()
    evict_locations: tuple[str, ...] = ()  # refcount-zero eviction tiers; () = every tier
    ddr_budget_chunks: int = 0  # budget of the unnamed default namespace; 0 = none
    turn_in_flight_timeout_s: float = 600.0  # a turn_start with no turn_end stops pinning
    budget_check_interval_s: float = 1.0  # at most one budget pass per namespace this often
    # Forks (docs/forks.md): a hold older than this is released as its fork_end would be
    # (0 = never); and at most this many open forks per session.
    fork_hold_ttl_s: float = 86400.0
    max_forks_per_session: int = 64
    # Scale-out (docs/scale-out.md): a postgresql:// URL puts sessions in PostgreSQL, shared
    # by the daemons of many nodes ("" = the SQLite file at session_store_path); node_id
    # names this daemon's node, the owner of the sessions it serves.
    session_store_url: str = ""
    node_id: str = field(default_factory=socket.gethostname)
    postgres_pool_size: int = 4
    ownership_check_s: float = 30.0  # ownership checked this often too, not only on reconnect
    ready_max_evict_backlog: int = 100_000  # /readyz fails above this outbox; 0 = no bound

    @property
    def host_port(self) -> tuple[str, int]:
        """listen_addr split into host and port ("[::1]:6998" works too)."""
        host, _, port = self.listen_addr.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"listen_addr must be HOST:PORT, got {self.listen_addr!r}")
        return host.strip("[]"), int(port)

    @property
    def store_shown(self) -> str:
        """Where sessions live, for logs: the PostgreSQL URL without its password, else the
        SQLite file."""
        url = self.session_store_url
        if not url:
            return self.session_store_path
        head, at, tail = url.rpartition("@")
        if not at:
            return url
        scheme, _, userinfo = head.partition("://")
        return f"{scheme}://{userinfo.partition(':')[0]}@{tail} (node {self.node_id})"

    def with_overrides(self, **changes: Any) -> Config:
        """A copy with ``changes`` applied (None values ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


_TYPES = {f.name: f.type for f in fields(Config)}

# The smallest value each number key takes, and what 0 means where 0 is allowed. Every
# other number must be positive: a 0 there would mean "refuse everything" or "never wait".
_MINIMUM: dict[str, tuple[float, bool]] = {  # key -> (bound, bound allowed)
    "max_hashes_per_event": (1, True),
    "max_hash_bytes": (1, True),
    "max_body_bytes": (1, True),
    "trace_buffer": (0, True),  # 0: keep no records (a reconnect gets a fresh snapshot)
    "trace_queue": (1, True),
    "backend_timeout_s": (0, False),
    "max_sessions": (0, True),  # 0: no cap
    "idempotency_window": (1, True),
    "idempotency_ttl_s": (0, False),
    "ddr_budget_chunks": (0, True),  # 0: no budget
    "turn_in_flight_timeout_s": (0, True),  # 0: a turn in flight never pins its session
    "budget_check_interval_s": (0, True),  # 0: a budget pass may run on every event
    "ready_max_evict_backlog": (0, True),  # 0: /readyz ignores the outbox's size
    "fork_hold_ttl_s": (0, True),  # 0: a fork hold never expires
    # Not 0, although the core reads 0 as "no limit": the limit bounds one session's memory.
    "max_forks_per_session": (1, True),
}
URL_KEYS = frozenset({"lmcache_url"})
__all__ = ["Config", "ConfigError", "load", "load_explicit", "url_problem", "value_problem"]


class ConfigError(ValueError):
    """An explicit config file that is missing, unreadable, not TOML, or has a bad value."""


def listen_problem(value: str) -> str | None:
    """Why ``value`` is not a usable HOST:PORT for listen_addr, or None."""
    host, _, port = value.rpartition(":")
    if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        return f"must be HOST:PORT with a port in 1..65535, got {value!r}"
    return None


def value_problem(name: str, value: Any) -> str | None:
    """Why ``value`` is not valid for config key ``name`` (type and range), or None.

    The one check both the daemon and the console's editor apply to a key.
    """
    kind = _TYPES.get(name)
    shown = "<hidden>" if name in SECRET_KEYS else repr(value)  # never log a secret
    if kind is None:
        return f"unknown config key '{name}'"
    if kind == "bool":
        return None if isinstance(value, bool) else f"must be true or false, got {shown}"
    if kind in ("int", "float"):
        ok_type = isinstance(value, int) if kind == "int" else isinstance(value, int | float)
        if not ok_type or isinstance(value, bool):
            return f"must be {'an integer' if kind == 'int' else 'a number'}, got {shown}"
        bound, inclusive = _MINIMUM.get(name, (0, False))
        if value < bound or (value == bound and not inclusive):
            return f"must be {'>=' if inclusive else '>'} {bound:g}, got {shown}"
        return None
    if kind == "str":
        if not isinstance(value, str):
            return f"must be a string, got {shown}"
        if name == "sqlite_synchronous" and value.upper() not in ("NORMAL", "FULL", "EXTRA"):
            return f"must be NORMAL, FULL or EXTRA, got {shown}"
        if name in URL_KEYS:
            return url_problem(value)
        if name == "listen_addr":
            return listen_problem(value)
        if name == "session_store_url" and value and not value.startswith(PG_SCHEMES):
            return "must be a postgresql:// URL or '' (the SQLite file)"
        if name == "node_id" and not value.strip():
            return "must not be empty"
        return None
    return None


def _coerce(name: str, value: Any) -> Any:
    problem = value_problem(name, value)
    if problem is not None:
        raise TypeError(f"config key '{name}' {problem}")
    return float(value) if _TYPES[name] == "float" else value


def from_mapping(
    data: dict[str, Any], source: str = "<mapping>", strict: bool = False
) -> tuple[Config, list[str]]:
    """Build a Config from parsed TOML; returns it and human-readable warnings.

    A bad value is a warning (the key keeps its default) unless ``strict``: then every
    bad top-level value is collected into one ConfigError. Unknown keys only warn.
    """
    warnings: list[str] = []
    errors: list[str] = []
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "deployments":
            values[key], more = parse_deployments(value)
            warnings += [f"{source}: {w}" for w in more]
            continue
        if key == "evict_locations":
            try:
                values[key] = locations_of(value, "evict_locations")
            except TypeError as err:
                errors.append(f"config key {err}")
            continue
        if key not in _TYPES:
            warnings.append(f"{source}: unknown config key '{key}' ignored")
            continue
        try:
            values[key] = _coerce(key, value)
        except TypeError as err:
            errors.append(str(err))
    if strict and errors:
        raise ConfigError(f"config file {source}: " + "; ".join(errors))
    warnings += [f"{source}: {e}; using the default" for e in errors]
    return Config(**values), warnings


def resolve_path(cli_path: str | None) -> Path:
    """--config, else $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml."""
    if cli_path:
        return Path(cli_path)
    env = os.environ.get(ENV_CONFIG)
    return Path(env) if env else DEFAULT_CONFIG_PATH


def load(cli_path: str | None = None) -> tuple[Config, list[str]]:
    """Load the config file; a missing or unparseable file gives defaults and a warning.

    The original's fallback, kept for $RAM_A_KV_CONFIG and the default path; an explicit
    ``--config`` goes through :func:`load_explicit` instead.
    """
    path = resolve_path(cli_path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config(), [f"config file {path} not found; using built-in defaults"]
    except OSError as err:
        return Config(), [f"config file {path} unreadable ({err}); using built-in defaults"]
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        return Config(), [f"config file {path} is not valid TOML ({err}); using built-in defaults"]
    return from_mapping(data, str(path))


def load_explicit(path: str) -> tuple[Config, list[str]]:
    """Load a file the operator named: missing, unreadable, not TOML or a bad value
    raises ConfigError naming the file and the error (never silently the defaults)."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError as err:
        raise ConfigError(f"config file {path} not found") from err
    except OSError as err:
        raise ConfigError(f"config file {path} unreadable: {err}") from err
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from err
    return from_mapping(data, path, strict=True)


def load_for_cli(cli_path: str | None) -> tuple[Config, list[str]]:
    """``--config`` strictly (ConfigError), else the fallback chain of :func:`load`."""
    return load_explicit(cli_path) if cli_path else load(None)


def effective(cfg: Config) -> dict[str, Any]:
    """The config as TOML-ready values (auth_token hidden): what ``--check-config`` prints."""
    out: dict[str, Any] = {}
    for f in fields(Config):
        value = getattr(cfg, f.name)
        if f.name in SECRET_KEYS:
            value = "<hidden>" if value else ""
        elif f.name == "deployments":
            value = [_deployment_table(d) for d in value]
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def _deployment_table(d: Deployment) -> dict[str, Any]:
    table: dict[str, Any] = {
        "name": d.name,
        "namespace": d.namespace or "",
        "ddr_budget_chunks": d.ddr_budget_chunks,
    }
    if d.lmcache_url:
        table["lmcache_url"] = d.lmcache_url
    if d.evict_locations is not None:
        table["evict_locations"] = list(d.evict_locations)
    if d.problems:
        table["problems"] = list(d.problems)
    return table
