"""Config loading (file, env, --config, fallbacks, warnings), listen rules and the bearer token."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.daemon_proc import DaemonProcess, write_config

from ramakv_daemon import config as config_mod
from ramakv_daemon.__main__ import is_loopback, main
from ramakv_daemon.config import Config

ORIGINAL_KEYS = """
listen_addr = "127.0.0.1:7000"
lmcache_url = "http://10.0.0.5:6999"
debug_enabled = true
debug_dir = "/tmp/kv-debug"
noop_backend = true
trace_events = true
session_store_path = "/tmp/kv/sessions.db"
turn_start_prefetch = false
"""


@pytest.fixture(autouse=True)
def _no_env_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAM_A_KV_CONFIG", raising=False)


def test_original_config_file_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(ORIGINAL_KEYS)
    cfg, warnings = config_mod.load(str(path))
    assert warnings == []
    assert cfg.listen_addr == "127.0.0.1:7000" and cfg.host_port == ("127.0.0.1", 7000)
    assert cfg.lmcache_url == "http://10.0.0.5:6999"
    assert cfg.debug_enabled is True and cfg.debug_dir == "/tmp/kv-debug"
    assert cfg.noop_backend is True and cfg.trace_events is True
    assert cfg.session_store_path == "/tmp/kv/sessions.db"
    assert cfg.turn_start_prefetch is False


def test_defaults() -> None:
    cfg = Config()
    assert cfg.listen_addr == "127.0.0.1:6998"
    assert cfg.lmcache_url == "http://localhost:6999"
    assert (cfg.debug_enabled, cfg.noop_backend, cfg.trace_events) == (False, False, False)
    assert cfg.debug_dir == "kvcache_debug" and cfg.turn_start_prefetch is True
    assert (cfg.max_hashes_per_event, cfg.max_hash_bytes) == (1000, 100)
    assert cfg.max_body_bytes == 8 * 1024 * 1024


def test_missing_file_gives_defaults_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    cfg, warnings = config_mod.load(str(path))
    assert cfg == Config()
    assert len(warnings) == 1 and str(path) in warnings[0] and "not found" in warnings[0]


def test_invalid_toml_gives_defaults_and_names_file_and_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('listen_addr = "127.0.0.1:1"\nnoop_backend = yes\n')
    cfg, warnings = config_mod.load(str(path))
    assert cfg == Config()
    assert len(warnings) == 1
    w = warnings[0]
    assert str(path) in w and "not valid TOML" in w
    assert "line 2" in w  # the parser's own message is passed on


def test_non_utf8_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'debug_dir = "caf\xe9"\n')
    cfg, warnings = config_mod.load(str(path))
    assert cfg == Config() and str(path) in warnings[0]


def test_unknown_key_warns_and_the_rest_applies(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("noop_backend = true\nflux_capacitor = 88\n")
    cfg, warnings = config_mod.load(str(path))
    assert cfg.noop_backend is True
    assert warnings == [f"{path}: unknown config key 'flux_capacitor' ignored"]


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('noop_backend = "yes"', "noop_backend"),
        ("listen_addr = 6998", "listen_addr"),
        ("max_hashes_per_event = 0", "max_hashes_per_event"),
        ("max_hashes_per_event = true", "max_hashes_per_event"),
    ],
)
def test_wrong_type_warns_and_keeps_default(tmp_path: Path, line: str, key: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(line + "\n")
    cfg, warnings = config_mod.load(str(path))
    assert getattr(cfg, key) == getattr(Config(), key)
    assert len(warnings) == 1 and key in warnings[0] and str(path) in warnings[0]


def test_path_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert config_mod.resolve_path(None) == Path("/etc/ram-a-kv/config.toml")
    env_file = write_config(tmp_path / "env.toml", {"debug_dir": "from-env"})
    cli_file = write_config(tmp_path / "cli.toml", {"debug_dir": "from-cli"})
    monkeypatch.setenv("RAM_A_KV_CONFIG", str(env_file))
    assert config_mod.load(None)[0].debug_dir == "from-env"
    assert config_mod.load(str(cli_file))[0].debug_dir == "from-cli"


def test_default_store_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(config_mod.os, "geteuid", lambda: 0)
    assert config_mod.default_store_path() == "/var/lib/ram-a-kv/sessions.db"
    monkeypatch.setattr(config_mod.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert config_mod.default_store_path() == str(tmp_path / "state/ram-a-kv/sessions.db")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config_mod.default_store_path() == str(
        tmp_path / "home/.local/state/ram-a-kv/sessions.db"
    )


def test_config_flag_applies_to_the_real_daemon(tmp_path: Path) -> None:
    """--config: limits from the file apply, unknown keys are logged, flags still win."""
    cfg = write_config(
        tmp_path / "daemon.toml",
        {"max_hashes_per_event": 2, "listen_addr": "127.0.0.1:1", "mystery": 1},
    )
    with DaemonProcess(tmp_path / "d", config_path=cfg) as d:
        answer = d.event(
            "turn_end", session_id="s", kv_transfer_params={"chunk_hashes": ["a", "b", "c"]}
        )
        assert answer["error"] == (
            "'kv_transfer_params.chunk_hashes' has 3 hashes, more than the limit of 2"
        )
        log = d.log()
    assert f"{cfg}: unknown config key 'mystery' ignored" in log
    assert "ram-a-kv daemon starting" in log and f"addr=127.0.0.1:{d.port}" in log
    assert "noop=True" in log


def test_env_config_and_bad_file_in_the_real_daemon(tmp_path: Path) -> None:
    """RAM_A_KV_CONFIG is read; an invalid file is named in the log and defaults apply."""
    bad = tmp_path / "bad.toml"
    bad.write_text("this is [not toml\n")
    d = DaemonProcess(tmp_path / "d", config_flag=False, env={"RAM_A_KV_CONFIG": str(bad)})
    assert "--config" not in d.command()
    with d:
        assert d.event("health")["ok"] is True
        log = d.log()
    assert f"config file {bad} is not valid TOML" in log and "using built-in defaults" in log


@pytest.mark.parametrize("addr", ["0.0.0.0:6998", "192.0.2.7:6998", "[::]:6998", "example.com:1"])
def test_non_loopback_without_token_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, addr: str
) -> None:
    cfg = write_config(tmp_path / "c.toml", {"noop_backend": True})
    with caplog.at_level(logging.INFO, logger="ramakv"):
        rc = main(["--listen", addr, "--store", str(tmp_path / "s.db"), "--config", str(cfg)])
    assert rc == 2
    assert f"refusing to bind {addr}" in caplog.text
    assert "auth_token" in caplog.text
    assert not (tmp_path / "s.db").exists()


def test_bad_listen_addr(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = write_config(tmp_path / "c.toml", {})
    assert main(["--listen", "nonsense", "--config", str(cfg)]) == 2


@pytest.mark.parametrize(
    ("host", "loop"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop


async def test_bearer_token_required_when_configured(start_daemon, make_config) -> None:  # type: ignore[no-untyped-def]
    d = await start_daemon(make_config(auth_token="s3cret"))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
        status, body = await d.post({"type": "health"}, headers=headers)
        assert status == 401 and body["ok"] is False and "data" not in body
    assert d.daemon.default.manager.sessions == {}
    status, body = await d.post(
        {"type": "turn_end", "session_id": "s", "kv_transfer_params": {"chunk_hashes": ["a"]}},
        headers={"Authorization": "Bearer wrong"},
    )
    assert status == 401 and d.daemon.default.manager.sessions == {}
    status, body = await d.post({"type": "health"}, headers={"Authorization": "Bearer s3cret"})
    assert status == 200 and body["ok"] is True
