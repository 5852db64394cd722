"""The host-side config file: ``daemon_url`` (and ``auth_token``) for the SDK, CLI and proxy."""

from __future__ import annotations

import logging
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("ramakv_sdk")

DEFAULT_DAEMON_URL = "http://127.0.0.1:6998"


@dataclass(frozen=True, slots=True)
class SdkConfig:
    """What a host needs to reach the daemon."""

    daemon_url: str = DEFAULT_DAEMON_URL
    auth_token: str = ""


def config_path() -> Path:
    """``$XDG_CONFIG_HOME/ram-a-kv/config.toml``, XDG_CONFIG_HOME defaulting to ~/.config."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    root = Path(base) if base else Path.home() / ".config"
    return root / "ram-a-kv" / "config.toml"


def load_config(path: str | os.PathLike[str] | None = None) -> SdkConfig | None:
    """Read the SDK config; None when the file is missing, unreadable or has no daemon_url.

    As the original SDK: ``daemon_url`` is required, ``auth_token`` optional. A file that
    exists but is broken is logged as a warning; a missing file is not.
    """
    p = Path(path) if path is not None else config_path()
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        log.warning("ram-a-kv SDK config %s unreadable: %s", p, err)
        return None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        log.warning("ram-a-kv SDK config %s is not valid TOML: %s", p, err)
        return None
    url = data.get("daemon_url")
    token = data.get("auth_token", "")
    if not isinstance(url, str) or not url.strip():
        log.warning("ram-a-kv SDK config %s has no daemon_url string", p)
        return None
    if not isinstance(token, str):
        log.warning("ram-a-kv SDK config %s: auth_token must be a string", p)
        return None
    return SdkConfig(daemon_url=url.strip().rstrip("/"), auth_token=token)


def daemon_url(path: str | os.PathLike[str] | None = None) -> str:
    """The configured daemon_url, else http://127.0.0.1:6998."""
    cfg = load_config(path)
    return cfg.daemon_url if cfg else DEFAULT_DAEMON_URL


def auth_token(path: str | os.PathLike[str] | None = None) -> str | None:
    """The configured auth_token, or None when there is none."""
    cfg = load_config(path)
    return (cfg.auth_token or None) if cfg else None
