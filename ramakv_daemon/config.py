"""Daemon configuration: TOML top-level keys -> a frozen dataclass, with safe defaults."""

from __future__ import annotations

import logging
import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ramakv_daemon.deployments import Deployment, locations_of, parse_deployments

log = logging.getLogger("ramakv.config")

DEFAULT_CONFIG_PATH = Path("/etc/ram-a-kv/config.toml")
ENV_CONFIG = "RAM_A_KV_CONFIG"
SECRET_KEYS = frozenset({"auth_token"})


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

    @property
    def host_port(self) -> tuple[str, int]:
        """listen_addr split into host and port ("[::1]:6998" works too)."""
        host, _, port = self.listen_addr.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"listen_addr must be HOST:PORT, got {self.listen_addr!r}")
        return host.strip("[]"), int(port)

    def with_overrides(self, **changes: Any) -> Config:
        """A copy with ``changes`` applied (None values ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


_TYPES = {f.name: f.type for f in fields(Config)}


def _coerce(name: str, value: Any) -> Any:
    kind = _TYPES[name]
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if kind == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        if name == "fork_hold_ttl_s" and value < 0:
            raise TypeError("config key 'fork_hold_ttl_s' must be >= 0 (0 = never expire)")
        return float(value)
    if kind == "str" and isinstance(value, str):
        if name == "sqlite_synchronous" and value.upper() not in ("NORMAL", "FULL", "EXTRA"):
            raise TypeError("config key 'sqlite_synchronous' must be NORMAL, FULL or EXTRA")
        return value
    shown = "<hidden>" if name in SECRET_KEYS else repr(value)  # never log a secret
    raise TypeError(f"config key '{name}' must be {kind}, got {shown}")


def from_mapping(data: dict[str, Any], source: str = "<mapping>") -> tuple[Config, list[str]]:
    """Build a Config from parsed TOML; returns it and human-readable warnings."""
    warnings: list[str] = []
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
                warnings.append(f"{source}: config key {err}; using the default")
            continue
        if key not in _TYPES:
            warnings.append(f"{source}: unknown config key '{key}' ignored")
            continue
        try:
            values[key] = _coerce(key, value)
        except TypeError as err:
            warnings.append(f"{source}: {err}; using the default")
    return Config(**values), warnings


def resolve_path(cli_path: str | None) -> Path:
    """--config, else $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml."""
    if cli_path:
        return Path(cli_path)
    env = os.environ.get(ENV_CONFIG)
    return Path(env) if env else DEFAULT_CONFIG_PATH


def load(cli_path: str | None = None) -> tuple[Config, list[str]]:
    """Load the config file; a missing or unparseable file gives defaults and a warning."""
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
