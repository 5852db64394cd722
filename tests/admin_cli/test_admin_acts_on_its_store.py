"""ramakv-admin acts on the store it names and nothing else: a close through the running
daemon is guarded by the planned state, the daemon must be the one holding the store's
lock, contradictory flags are refused, and only what was closed is counted."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.daemon_proc import DaemonProcess, write_config

from ramakv_daemon.cli import admin
from ramakv_daemon.cli.admin import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out)
    return code, out.getvalue()


def seeded(factory: Callable[..., DaemonProcess], **kwargs: Any) -> DaemonProcess:
    d = factory(**kwargs)
    for sid, hashes in (("a", ["01", "02"]), ("b", ["02", "03"])):
        body = d.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes})
        assert body["ok"] is True
    return d


def sessions(d: DaemonProcess) -> list[str]:
    return [s["session_id"] for s in d.event("list_sessions")["data"]["sessions"]]


def after_the_plan(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> None:
    """Run ``act`` right after ramakv-admin printed its plan, before it carries it out."""
    describe = admin.describe

    def describe_then_act(*args: Any, **kwargs: Any) -> None:
        describe(*args, **kwargs)
        act()

    monkeypatch.setattr(admin, "describe", describe_then_act)


def test_a_session_an_event_reached_after_the_plan_is_left(
    daemon_proc_factory: Callable[..., DaemonProcess],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    d = seeded(daemon_proc_factory)
    turn = {"chunk_hashes": ["01", "04"]}
    after_the_plan(
        monkeypatch,
        lambda: d.event("turn_end", session_id="a", kv_transfer_params=turn),
    )
    code, text = run(
        "--db", str(d.store), "--url", d.url, "close-idle", "--older-than", "0s", "--yes"
    )
    assert "close a " in text and "close b " in text  # both were planned
    assert "closed 1 sessions through the daemon" in text and "1 left as they are" in text
    assert "session a: an event reached it since the plan" in capsys.readouterr().err
    assert code == 0
    assert sessions(d) == ["a"]  # its acknowledged turn stands
    assert d.event("session_map", session_id="a")["data"]["chunk_hashes"] == ["01", "04"]


def test_a_guarded_close_is_refused_when_the_session_changed(
    daemon_proc_factory: Callable[..., DaemonProcess],
) -> None:
    d = seeded(daemon_proc_factory)
    [row] = [s for s in d.event("list_sessions")["data"]["sessions"] if s["session_id"] == "a"]
    planned = row["last_event_ts"]
    d.event("turn_start", session_id="a")  # an event: the session is no longer idle
    body = d.event("session_close", session_id="a", if_idle_since=planned)
    assert body["ok"] is True and body["data"]["closed"] is False  # nothing changed
    assert sessions(d) == ["a", "b"]
    for bad in ("1.0", True, -1, [planned]):
        body = d.event("session_close", session_id="b", if_idle_since=bad)
        assert body["ok"] is False and "'if_idle_since' must be" in body["error"], bad
    assert sessions(d) == ["a", "b"]
    [row] = [s for s in d.event("list_sessions")["data"]["sessions"] if s["session_id"] == "b"]
    body = d.event("session_close", session_id="b", if_idle_since=row["last_event_ts"])
    assert body["ok"] is True and body["data"]["closed"] is True
    assert sessions(d) == ["a"]


def test_only_the_daemon_holding_the_store_is_used(
    daemon_proc_factory: Callable[..., DaemonProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    x = seeded(daemon_proc_factory)
    y = seeded(daemon_proc_factory)  # the same session ids, another store
    code, text = run("--db", str(x.store), "--url", y.url, "close-idle", "--older-than", "0s")
    assert code == 0 and "with --yes: refused (exit 4)" in text
    assert f"the daemon at {y.url} is not the one holding it" in text
    code, _ = run("--db", str(x.store), "--url", y.url, "close-idle", "--older-than", "0s", "--yes")
    assert code == 4
    assert f"the daemon at {y.url} is not the one holding it" in capsys.readouterr().err
    assert sessions(x) == ["a", "b"] and sessions(y) == ["a", "b"]
    # A daemon restarted on the same file writes a new token, and says it.
    x.stop()
    x.start()
    code, text = run("--db", str(x.store), "--url", x.url, "close-idle", "--older-than", "0s")
    assert "with --yes: through the daemon at" in text


def test_contradictory_config_and_db_are_refused(
    daemon_proc_factory: Callable[..., DaemonProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    x = seeded(daemon_proc_factory)
    y = seeded(daemon_proc_factory)
    y_toml = write_config(
        tmp_path / "y.toml",
        {"session_store_path": str(y.store), "listen_addr": f"127.0.0.1:{y.port}"},
    )
    code, _ = run(
        "--config", str(y_toml), "--db", str(x.store), "close-idle", "--older-than", "0s", "--yes"
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"--db {x.store} contradicts --config {y_toml}" in err and str(y.store) in err
    assert sessions(x) == ["a", "b"] and sessions(y) == ["a", "b"]
    # The same store spelt twice agrees; --config alone finds its daemon.
    code, text = run(
        "--config", str(y_toml), "--db", str(y.store), "close-idle", "--older-than", "0s"
    )
    assert code == 0 and f"with --yes: through the daemon at {y.url}" in text
    code, text = run("--config", str(y_toml), "close-idle", "--older-than", "0s", "--yes")
    assert code == 0 and "closed 2 sessions through the daemon" in text
    assert sessions(y) == [] and sessions(x) == ["a", "b"]


def test_sessions_gone_before_the_close_are_not_counted(
    daemon_proc_factory: Callable[..., DaemonProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = seeded(daemon_proc_factory)
    after_the_plan(monkeypatch, lambda: d.event("session_close", session_id="b"))
    code, text = run(
        "--db", str(d.store), "--url", d.url, "close-idle", "--older-than", "0s", "--yes"
    )
    assert code == 0
    assert "closed 1 sessions through the daemon" in text and "1 left as they are" in text
    assert sessions(d) == []
