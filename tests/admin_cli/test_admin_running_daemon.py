"""ramakv-admin next to a real daemon process: it names the store and the lock's holder,
says in a dry run what --yes would do, refuses unknown namespaces and a bad --config."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

from support.daemon_proc import DaemonProcess, write_config

from ramakv_daemon.cli.admin import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out)
    return code, out.getvalue()


def seeded(factory) -> DaemonProcess:  # type: ignore[no-untyped-def]
    d = factory()
    for sid, hashes in (("a", ["01", "02"]), ("b", ["02", "03"])):
        assert (
            d.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes})["ok"]
            is True
        )
    return d


def test_reports_name_the_store(daemon_proc_factory) -> None:
    d = seeded(daemon_proc_factory)
    code, text = run("--db", str(d.store), "report")
    assert code == 0 and text.splitlines()[0] == f"store: {d.store}"
    code, text = run("--db", str(d.store), "report", "--json")
    assert code == 0 and json.loads(text)["store"] == str(d.store)


def test_dry_runs_say_what_the_real_run_would_do(daemon_proc_factory, tmp_path: Path) -> None:
    d = seeded(daemon_proc_factory)
    holder = f"pid {d.proc.pid} (ram-a-kv)"
    dead_url = "http://127.0.0.1:9"
    code, text = run("--db", str(d.store), "--url", d.url, "close-idle", "--older-than", "0s")
    assert code == 0 and f"store: {d.store}" in text
    assert f"with --yes: through the daemon at {d.url} ({holder} holds the store)" in text
    code, text = run("--db", str(d.store), "--url", dead_url, "close-idle", "--older-than", "0s")
    assert (
        f"with --yes: refused (exit 4): {d.store} is in use by {holder} and no daemon "
        f"answers at {dead_url}"
    ) in text
    code, text = run("--db", str(d.store), "vacuum")
    assert f"with --yes: refused (exit 4): {d.store} is in use by {holder}" in text
    # ... and the real runs do exactly that.
    assert (
        run("--db", str(d.store), "--url", dead_url, "close-idle", "--older-than", "0s", "--yes")[0]
        == 4
    )
    assert run("--db", str(d.store), "vacuum", "--yes")[0] == 4
    code, text = run(
        "--db", str(d.store), "--url", d.url, "close-idle", "--older-than", "0s", "--yes"
    )
    assert code == 0 and "closed 2 sessions through the daemon" in text
    assert d.event("list_sessions")["data"]["sessions"] == []
    d.stop()
    code, text = run("--db", str(d.store), "vacuum")
    assert f"with --yes: {d.store} is changed directly (no daemon holds it)" in text


def test_admin_holding_the_lock_keeps_a_daemon_out(tmp_path: Path) -> None:
    """While ramakv-admin acts on the file, a daemon refuses to start, naming it."""
    from ramakv_daemon.adapters.sqlite.admin import exclusive

    d = DaemonProcess(tmp_path / "d")
    with d:
        pass
    with exclusive(str(d.store)) as (free, _):
        assert free
        try:
            d.start(timeout=20)
        except RuntimeError as err:
            assert "(ramakv-admin)" in str(err) and str(d.store) in str(err)
        else:
            raise AssertionError("a daemon started while ramakv-admin held the store")


def test_unknown_namespace_is_refused(daemon_proc_factory, capsys) -> None:  # type: ignore[no-untyped-def]
    d = seeded(daemon_proc_factory)
    sqlite_before = sqlite3.connect(d.store).execute("SELECT count(*) FROM sessions").fetchone()
    for argv in (
        ("purge-namespace", "kvp-nope"),
        ("close-idle", "--older-than", "0s", "--namespace", "typo", "--yes"),
    ):
        code, _ = run("--db", str(d.store), "--url", d.url, *argv)
        assert code == 2
        assert "unknown namespace" in capsys.readouterr().err
    assert sqlite3.connect(d.store).execute("SELECT count(*) FROM sessions").fetchone() == (
        sqlite_before
    )
    # The default namespace ('') always exists.
    assert run("--db", str(d.store), "purge-namespace", "")[0] == 0


def test_explicit_config_must_exist(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, _ = run("--config", str(tmp_path / "missing.toml"), "report")
    assert code == 2 and "missing.toml not found" in capsys.readouterr().err
    bad = write_config(tmp_path / "bad.toml", {"max_sessions": -1})
    code, _ = run("--config", str(bad), "report")
    assert code == 2 and "max_sessions" in capsys.readouterr().err
