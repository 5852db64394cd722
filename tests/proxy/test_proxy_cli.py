"""The proxy's command line: ``python -m ramakv_proxy`` (as bench/ runs it), flags."""

from __future__ import annotations

import subprocess
import sys

from ramakv_proxy import parse_args, settings_from


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ramakv_proxy", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_module_runs_as_the_console_script() -> None:
    out = run("--version")
    assert out.returncode == 0 and out.stdout.startswith("ramakv-proxy ")


def test_bad_lifecycle_values_exit_2_naming_them() -> None:
    out = run("--upstream", "http://127.0.0.1:1", "--tool-pause-suspend-s", "-1")
    assert out.returncode == 2
    assert "tool_pause_suspend_s must be >= 0 (0 = off), got -1.0" in out.stderr
    out = run("--upstream", "http://127.0.0.1:1", "--run-end-grace-s", "-2")
    assert out.returncode == 2
    assert "run_end_grace_s must be >= 0 (0 = off), got -2.0" in out.stderr


def test_lifecycle_flags_reach_the_settings(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    args = parse_args(
        [
            "--upstream",
            "http://e:8000/",
            "--tool-pause-suspend-s",
            "0",
            "--restore-wait-ms",
            "250",
            "--session-idle-close-s",
            "60",
            "--run-end-close-s",  # the old name still works
            "0.5",
            "--daemon-wait-ms",
            "100",
            "--state-dir",
            str(tmp_path / "state"),
            "--scope-sessions-by-key",
            "--no-close-on-disconnect",
            "--turn-start-prefetch",
            "wait",
        ]
    )
    s = settings_from(args)
    assert (s.upstream, s.tool_pause_suspend_s, s.restore_wait_ms) == ("http://e:8000", 0, 250)
    assert (s.session_idle_close_s, s.close_on_disconnect, s.turn_start_prefetch) == (
        60,
        False,
        "wait",
    )
    assert s.run_end_grace_s == 0.5 and s.daemon_wait_ms == 100 and s.scope_sessions_by_key
    assert s.state_file == str(tmp_path / "state" / "pending-8001.json")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    defaults = settings_from(parse_args(["--upstream", "http://e:8000"]))
    assert defaults.state_file == str(tmp_path / "xdg" / "ram-a-kv" / "proxy" / "pending-8001.json")
    assert (defaults.daemon_wait_ms, defaults.scope_sessions_by_key) == (250, False)
    assert settings_from(parse_args(["--upstream", "u", "--state-dir", ""])).state_file is None
    assert (defaults.tool_pause_suspend_s, defaults.restore_wait_ms) == (2.0, 1000)
    assert (defaults.session_idle_close_s, defaults.session_header) == (900.0, "X-Session-ID")
    assert defaults.run_end_grace_s == 5.0
