"""An explicit --config must be right (exit 2 naming file and error); 0 where it means
"none"; URLs checked; --check-config prints the effective config; --version everywhere."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.daemon_proc import REPO_ROOT, DaemonProcess, free_port, write_config

from ramakv_daemon import config as config_mod
from ramakv_daemon.config import Config, ConfigError, url_problem, value_problem
from ramakv_sdk.version import package_version


def run_daemon(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The daemon in the foreground; these runs all exit by themselves."""
    import os

    full_env = {k: v for k, v in os.environ.items() if k != "RAM_A_KV_CONFIG"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ramakv_daemon", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO_ROOT),
        env=full_env,
    )


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "not found"),
        ("this is [not toml\n", "is not valid TOML"),
        (
            'lmcache_url = "http://localhost:6999XYZ"\n',
            "config key 'lmcache_url' is not a valid URL",
        ),
        ("max_hashes_per_event = 0\n", "config key 'max_hashes_per_event' must be >= 1, got 0"),
        ('sqlite_synchronous = "OFF"\n', "must be NORMAL, FULL or EXTRA"),
        ('backend = "lmcache_mp"\n', "config key 'model_name' is required with backend"),
        ('backend = "vllm"\n', "must be one of lmcache, lmcache_mp, got 'vllm'"),
    ],
    ids=[
        "missing",
        "not toml",
        "bad url",
        "zero where 0 means nothing",
        "bad enum",
        "stock server without its model",
        "unknown backend",
    ],
)
def test_explicit_config_missing_or_invalid_exits_2(
    tmp_path: Path, content: str | None, error: str
) -> None:
    cfg = tmp_path / "daemon.toml"
    if content is not None:
        cfg.write_text(content)
    store = tmp_path / "s.db"
    proc = run_daemon(
        "--noop",
        "--config",
        str(cfg),
        "--store",
        str(store),
        "--listen",
        f"127.0.0.1:{free_port()}",
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"config file {cfg}" in proc.stdout and error in proc.stdout, proc.stdout
    assert "refusing to start" in proc.stdout
    assert not store.exists()  # it never got as far as the store


def test_env_and_default_path_keep_the_fallback(tmp_path: Path) -> None:
    """$RAM_A_KV_CONFIG naming a missing file: warned, defaults, the daemon runs."""
    d = DaemonProcess(
        tmp_path / "d", config_flag=False, env={"RAM_A_KV_CONFIG": str(tmp_path / "missing.toml")}
    )
    with d:
        assert d.event("health")["ok"] is True
    assert f"config file {tmp_path / 'missing.toml'} not found; using built-in defaults" in d.log()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ddr_budget_chunks", 0),
        ("max_sessions", 0),
        ("trace_buffer", 0),
        ("turn_in_flight_timeout_s", 0),
        ("budget_check_interval_s", 0),
        ("ready_max_evict_backlog", 0),
    ],
)
def test_zero_is_accepted_where_it_means_none(key: str, value: int) -> None:
    cfg, warnings = config_mod.from_mapping({key: value}, strict=True)
    assert warnings == [] and getattr(cfg, key) == value


@pytest.mark.parametrize(
    "key",
    [
        "max_hashes_per_event",
        "max_hash_bytes",
        "max_body_bytes",
        "trace_queue",
        "idempotency_window",
        "backend_timeout_s",
        "idempotency_ttl_s",
    ],
)
def test_zero_or_negative_is_refused_where_it_means_nothing(key: str) -> None:
    for bad in (0, -1):
        with pytest.raises(ConfigError, match=f"config key '{key}' must be "):
            config_mod.from_mapping({key: bad}, "f.toml", strict=True)
        cfg, warnings = config_mod.from_mapping({key: bad}, "f.toml")  # the fallback path
        assert getattr(cfg, key) == getattr(Config(), key) and "using the default" in warnings[0]


def test_max_sessions_zero_means_no_cap_in_a_real_daemon(tmp_path: Path) -> None:
    with DaemonProcess(tmp_path / "d", config={"max_sessions": 0}) as d:
        for i in range(3):
            assert (
                d.event("turn_end", session_id=f"s{i}", kv_transfer_params={"chunk_hashes": ["h"]})[
                    "ok"
                ]
                is True
            )
        log = d.log()
    assert "must be" not in log and "using the default" not in log


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:6999XYZ",
        "localhost:6999",
        "ftp://h:1",
        "http://:6999",
        "http://h:0",
        "http://h:70000",
        "http://h:6999 ",
        "http://h:1/?q=1",
        "",
    ],
)
def test_bad_urls_are_named(url: str) -> None:
    assert url_problem(url) is not None
    assert value_problem("lmcache_url", url) is not None
    with pytest.raises(ConfigError, match="lmcache_url"):
        config_mod.from_mapping({"lmcache_url": url}, strict=True)


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:6999",
        "https://10.0.0.5:6999/",
        "http://[::1]:6999",
        "http://lmcache.internal",
    ],
)
def test_good_urls_pass(url: str) -> None:
    assert url_problem(url) is None


def test_deployment_url_is_checked_too() -> None:
    cfg, warnings = config_mod.from_mapping(
        {"deployments": [{"name": "d", "lmcache_url": "http://h:6999XYZ"}]}, "f.toml"
    )
    assert cfg.deployments[0].lmcache_url is None
    assert any("'lmcache_url' is not a valid URL" in w for w in warnings), warnings


def test_check_config_prints_the_effective_config(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "c.toml", {"max_sessions": 0, "auth_token": "s3cret", "ddr_budget_chunks": 0}
    )
    proc = run_daemon(
        "--config", str(cfg), "--store", str(tmp_path / "x.db"), "--noop", "--check-config"
    )
    assert proc.returncode == 0, proc.stderr
    printed = tomllib.loads(proc.stdout)
    assert printed["max_sessions"] == 0 and printed["noop_backend"] is True
    assert printed["session_store_path"] == str(tmp_path / "x.db")  # flags applied
    assert printed["auth_token"] == "<hidden>" and "s3cret" not in proc.stdout + proc.stderr
    assert set(printed) == {f for f in Config.__dataclass_fields__}
    assert str(cfg) in proc.stdout and not (tmp_path / "x.db").exists()
    bad = write_config(tmp_path / "bad.toml", {"lmcache_url": "http://h:1x"})
    proc = run_daemon("--config", str(bad), "--check-config")
    assert proc.returncode == 2 and "lmcache_url" in proc.stderr


SCRIPTS = [
    "ram-a-kv",
    "ramakv-console",
    "ramakv",
    "ramakv-proxy",
    "ramakv-admin",
    "ramakv-identity",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_console_script_has_version(script: str) -> None:
    exe = Path(sys.executable).parent / script
    proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{script} {package_version()}"


def test_a_clean_stop_is_logged(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "d")
    d.start()
    assert d.stop() == 0  # SIGTERM
    log = d.log()
    assert "ram-a-kv daemon shutting down" in log
    assert f"ram-a-kv daemon stopped (store {d.store} closed)" in log
    assert log.index("shutting down") < log.index("daemon stopped")
