"""Daemon configuration: TOML top-level keys, checked and defaulted by the config schema."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.deployments import Deployment, parse_deployments
from ramakv_protocol import config_schema as schema
from ramakv_protocol.config_schema import (
    PG_SCHEMES,
    SECRET_KEYS,
    default_store_path,
    listen_problem,
    url_problem,
    value_problem,
)

DEFAULT_CONFIG_PATH = schema.DEFAULT_PATH
ENV_CONFIG = schema.ENV_PATH
# --config, else $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml (the console's lookup too).
resolve_path = schema.config_path
__all__ = [
    "PG_SCHEMES",
    "SECRET_KEYS",
    "Config",
    "ConfigError",
    "default_store_path",
    "listen_problem",
    "load",
    "load_explicit",
    "url_problem",
    "value_problem",
]


def _default(name: str) -> Any:
    """Config field ``name``'s default, from the schema (a factory where the host decides)."""
    key = schema.BY_NAME[name]
    if key.factory is not None:
        return field(default_factory=key.factory)
    return key.default


@dataclass(frozen=True, slots=True)
class Config:
    """Every daemon setting, typed; keys, defaults, rules and docs are in the schema
    (ramakv_protocol/config_schema.py), which a test holds these fields to."""

    listen_addr: str = _default("listen_addr")
    lmcache_url: str = _default("lmcache_url")
    debug_enabled: bool = _default("debug_enabled")
    debug_dir: str = _default("debug_dir")
    noop_backend: bool = _default("noop_backend")
    backend: str = _default("backend")
    model_name: str = _default("model_name")
    world_size: int = _default("world_size")
    cache_salt: str = _default("cache_salt")
    lmcache_mp_l2_path: str = _default("lmcache_mp_l2_path")
    l2_budget_bytes: int = _default("l2_budget_bytes")
    l2_check_interval_s: float = _default("l2_check_interval_s")
    trace_events: bool = _default("trace_events")
    session_store_path: str = _default("session_store_path")
    turn_start_prefetch: bool = _default("turn_start_prefetch")
    max_hashes_per_event: int = _default("max_hashes_per_event")
    max_hash_bytes: int = _default("max_hash_bytes")
    max_body_bytes: int = _default("max_body_bytes")
    trace_buffer: int = _default("trace_buffer")
    trace_buffer_bytes: int = _default("trace_buffer_bytes")
    trace_queue: int = _default("trace_queue")
    backend_timeout_s: float = _default("backend_timeout_s")
    evict_defer_s: float = _default("evict_defer_s")
    auth_token: str = _default("auth_token")
    max_sessions: int = _default("max_sessions")
    idempotency_window: int = _default("idempotency_window")
    idempotency_ttl_s: float = _default("idempotency_ttl_s")
    sqlite_synchronous: str = _default("sqlite_synchronous")
    sqlite_commit_thread: bool = _default("sqlite_commit_thread")
    fork_hold_ttl_s: float = _default("fork_hold_ttl_s")
    max_forks_per_session: int = _default("max_forks_per_session")
    idle_suspend_s: float = _default("idle_suspend_s")
    idle_close_s: float = _default("idle_close_s")
    retain_unreferenced_s: float = _default("retain_unreferenced_s")
    evict_locations: tuple[str, ...] = _default("evict_locations")
    ddr_budget_chunks: int = _default("ddr_budget_chunks")
    turn_in_flight_timeout_s: float = _default("turn_in_flight_timeout_s")
    budget_check_interval_s: float = _default("budget_check_interval_s")
    ready_max_evict_backlog: int = _default("ready_max_evict_backlog")
    session_store_url: str = _default("session_store_url")
    node_id: str = _default("node_id")
    postgres_pool_size: int = _default("postgres_pool_size")
    ownership_check_s: float = _default("ownership_check_s")
    deployments: tuple[Deployment, ...] = _default("deployments")

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


class ConfigError(ValueError):
    """An explicit config file that is missing, unreadable, not TOML, or has a bad value."""


def from_mapping(
    data: JsonObject, source: str = "<mapping>", strict: bool = False
) -> tuple[Config, list[str]]:
    """Build a Config from parsed TOML; returns it and human-readable warnings.

    A bad value is a warning (the key keeps its default) unless ``strict``: then every
    bad top-level value is collected into one ConfigError. Unknown keys only warn.
    """
    warnings: list[str] = []
    errors: list[str] = []
    values: JsonObject = {}
    for key, value in data.items():
        if key == "deployments":
            values[key], more = parse_deployments(value)
            warnings += [f"{source}: {w}" for w in more]
            continue
        if key not in schema.BY_NAME:
            warnings.append(f"{source}: unknown config key '{key}' ignored")
            continue
        try:
            values[key] = schema.normalised(key, value)
        except ValueError as err:
            errors.append(str(err))
    if values.get("backend") == "lmcache_mp" and not values.get("model_name"):
        # The stock server keys every chunk by the model: without it nothing would match.
        del values["backend"]
        errors.append(
            "config key 'model_name' is required with backend = \"lmcache_mp\" "
            "(vLLM's --model string, the server's key)"
        )
    if strict and errors:
        raise ConfigError(f"config file {source}: " + "; ".join(errors))
    warnings += [f"{source}: {e}; using the default" for e in errors]
    return Config(**values), warnings


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


def effective(cfg: Config) -> JsonObject:
    """The config as TOML-ready values (auth_token hidden): what ``--check-config`` prints."""
    out: JsonObject = {}
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


def _deployment_table(d: Deployment) -> JsonObject:
    table: JsonObject = {
        "name": d.name,
        "namespace": d.namespace or "",
        "ddr_budget_chunks": d.ddr_budget_chunks,
    }
    if d.lmcache_url:
        table["lmcache_url"] = d.lmcache_url
    if d.evict_locations is not None:
        table["evict_locations"] = list(d.evict_locations)
    for name in ("idle_suspend_s", "idle_close_s"):
        if getattr(d, name) is not None:
            table[name] = getattr(d, name)
    if d.l2_path is not None:
        table["lmcache_mp_l2_path"] = d.l2_path
    if d.l2_budget_bytes is not None:
        table["l2_budget_bytes"] = d.l2_budget_bytes
    if d.problems:
        table["problems"] = list(d.problems)
    return table
