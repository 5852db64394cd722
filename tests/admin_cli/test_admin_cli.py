"""ramakv-admin: reports; dry runs change nothing; --yes does exactly what the dry run listed."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import sqlite3
import time
from pathlib import Path

import tomli_w
from aiohttp.test_utils import TestServer
from support.ns_rig import Rig, ident

from ramakv_daemon.cli.admin import main
from ramakv_daemon.core.identity import namespace_of
from ramakv_daemon.http.app import init_app
from ramakv_daemon.http.keys import DAEMON_KEY

NS_A = namespace_of(ident())
NS_OLD = namespace_of(ident(model_id="old/model"))
DAY = 86400.0


def write_config(tmp_path: Path, url: str, *, with_old: bool = False) -> Path:
    deps = [{"name": "qwen", **ident(), "lmcache_url": url, "ddr_budget_chunks": 10}]
    if with_old:
        deps.append({"name": "old", **ident(model_id="old/model"), "lmcache_url": url})
    path = tmp_path / "config.toml"
    path.write_text(
        tomli_w.dumps(
            {
                "session_store_path": str(tmp_path / "sessions.db"),
                "listen_addr": "127.0.0.1:9",  # nothing answers there
                # The seeded ages are the tool's to act on, not the daemon's idle policies.
                "idle_suspend_s": 0,
                "idle_close_s": 0,
                "deployments": deps,
            }
        )
    )
    return path


async def seed(tmp_path: Path, url: str) -> Path:
    """Sessions in qwen, old (a namespace later dropped from the config) and the default."""
    cfg_path = write_config(tmp_path, url, with_old=True)
    from ramakv_daemon.config import load

    cfg, _ = load(str(cfg_path))
    async with Rig(cfg) as r:
        await r.turn_end("fresh", ["0001", "0002"], namespace="qwen")
        await r.turn_end("stale", ["0002", "0003"], namespace="qwen")
        await r.turn_end("parked", ["0004"], namespace="qwen")
        await r.ev("session_suspend", session_id="parked")
        await r.turn_end("gone", ["0001"], namespace="old")
        await r.turn_end("plain", ["0009"], namespace="")
        await r.settle()
    db = sqlite3.connect(cfg.session_store_path)
    now = time.time()
    ages = {"fresh": 60, "stale": 3 * DAY, "parked": 10 * DAY, "gone": 30 * DAY, "plain": 2 * DAY}
    with db:
        for sid, age in ages.items():
            db.execute(
                "UPDATE session_state SET last_event_ts=? WHERE session_id=?", (now - age, sid)
            )
    db.close()
    return write_config(tmp_path, url)  # "old" is no longer configured


def digest(path: Path) -> str:
    """Every row of every table (the file's meaning, not its bytes)."""
    con = sqlite3.connect(path)
    try:
        tables = sorted(
            r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
        )
        rows = {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}"))) for t in tables}
    finally:
        con.close()
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out)
    return code, out.getvalue()


async def test_report(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    cfg = await seed(tmp_path, fake.url)
    code, text = run("--config", str(cfg), "report", "--json")
    assert code == 0
    rep = json.loads(text)
    assert rep["sessions_total"] == 5 and rep["unconfigured"] == [NS_OLD]
    qwen = rep["namespaces"][NS_A]
    assert qwen["deployment"] == "qwen" and qwen["sessions"] == {"active": 2, "suspended": 1}
    assert qwen["idle"]["<10m"] == 1 and qwen["idle"]["<7d"] == 1 and qwen["idle"][">=7d"] == 1
    assert qwen["chunks_referenced"] == 3 and qwen["references"] == 4
    assert qwen["ddr_budget_chunks"] == 10 and qwen["budget_use"] == 0.3
    assert qwen["outbox"] == {}  # parked's chunk was demoted and delivered
    assert rep["namespaces"][NS_OLD]["configured"] is False
    code, text = run("--config", str(cfg), "report")
    assert code == 0 and "NOT CONFIGURED" in text and NS_OLD in text


async def test_dry_run_changes_nothing_and_yes_does_exactly_that(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    cfg = await seed(tmp_path, fake.url)
    db = tmp_path / "sessions.db"
    before = digest(db)
    code, text = run(
        "--config", str(cfg), "close-idle", "--older-than", "1d", "--namespace", "qwen"
    )
    assert code == 0 and "dry run" in text
    listed = sorted(line.split()[1] for line in text.splitlines() if line.startswith("close "))
    assert listed == ["parked", "stale"]
    assert digest(db) == before
    code, text2 = run(
        "--config", str(cfg), "close-idle", "--older-than", "1d", "--namespace", "qwen", "--yes"
    )
    assert code == 0 and "done" in text2
    # The same listing, then exactly those sessions gone; their chunks queued for eviction.
    assert text2.startswith(text.split("dry run")[0])
    con = sqlite3.connect(db)
    assert sorted(r[0] for r in con.execute("SELECT session_id FROM sessions")) == [
        "fresh",
        "gone",
        "plain",
    ]
    # stale's 0003 is free (0002 is still fresh's); parked's 0004 was demoted at suspend.
    assert sorted(con.execute("SELECT namespace, chunk_hash, mode FROM ns_evict_outbox")) == [
        (NS_A, "0003", "delete"),
        (NS_A, "0004", "delete"),
    ]
    con.close()
    # The next daemon start delivers them to the right backend, deleted from every tier.
    from ramakv_daemon.config import load

    async with Rig(load(str(cfg))[0]) as r:
        await r.settle()
        assert sorted(
            h for b in fake.calls("evict") for h in b["chunk_hashes"] if "locations" not in b
        ) == ["0003", "0004"]
        assert r.svc.namespaces.managers[NS_A].refcounts.as_dict() == {"0001": 1, "0002": 1}


async def test_purge_namespace_and_vacuum(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    cfg = await seed(tmp_path, fake.url)
    db = tmp_path / "sessions.db"
    before = digest(db)
    code, text = run("--config", str(cfg), "purge-namespace", NS_OLD)
    assert code == 0 and "close gone" in text and digest(db) == before
    assert run("--config", str(cfg), "vacuum")[0] == 0 and digest(db) == before
    code, _ = run("--config", str(cfg), "purge-namespace", NS_OLD, "--yes")
    assert code == 0
    con = sqlite3.connect(db)
    assert "gone" not in {r[0] for r in con.execute("SELECT session_id FROM sessions")}
    assert list(
        con.execute("SELECT chunk_hash FROM ns_evict_outbox WHERE namespace=?", (NS_OLD,))
    ) == [("0001",)]
    con.close()
    after = digest(db)
    assert run("--config", str(cfg), "vacuum", "--yes")[0] == 0 and digest(db) == after


async def test_running_daemon_read_only_or_through_its_events(tmp_path, two_fakes) -> None:
    fake, _ = two_fakes
    cfg_path = await seed(tmp_path, fake.url)
    from ramakv_daemon.config import load

    cfg = load(str(cfg_path))[0]
    db = tmp_path / "sessions.db"
    server = TestServer(init_app(cfg))
    await server.start_server()
    try:
        before = digest(db)
        # Reports work while it runs.
        code, _ = await asyncio.to_thread(run, "--config", str(cfg_path), "report")
        assert code == 0
        # No daemon at the configured URL, but its lock is held: refuse, change nothing.
        code, _ = await asyncio.to_thread(
            run, "--config", str(cfg_path), "close-idle", "--older-than", "1d", "--yes"
        )
        assert code == 4 and digest(db) == before
        assert (await asyncio.to_thread(run, "--config", str(cfg_path), "vacuum", "--yes"))[0] == 4
        # Given its URL, the listed sessions are closed through session_close events.
        url = str(server.make_url("")).rstrip("/")
        code, text = await asyncio.to_thread(
            run,
            "--config",
            str(cfg_path),
            "--url",
            url,
            "close-idle",
            "--older-than",
            "5d",
            "--yes",
        )
        assert code == 0 and "through the daemon" in text
        assert sorted(
            line.split()[1] for line in text.splitlines() if line.startswith("close ")
        ) == ["gone", "parked"]
        svc = server.app[DAEMON_KEY]
        left = {sid for m in svc.namespaces.managers.values() for sid in m.sessions}
        assert left == {"fresh", "stale", "plain"}
    finally:
        await server.close()


async def test_offline_close_keeps_forks_and_purge_ends_them(tmp_path, two_fakes) -> None:
    """A closed session's open forks stay held (as the daemon's close); purge-namespace
    ends the namespace's forks too."""
    fake, _ = two_fakes
    cfg_path = write_config(tmp_path, fake.url, with_old=True)
    from ramakv_daemon.config import load

    cfg, _ = load(str(cfg_path))
    async with Rig(cfg) as r:
        await r.turn_end("parent", ["0001", "0002"], namespace="qwen")
        await r.ev("session_fork", session_id="parent")
        await r.turn_end("parent", ["0002", "0003"], namespace="qwen")
        await r.turn_end("olds", ["0007"], namespace="old")
        await r.ev("session_fork", session_id="olds")
        await r.settle()
    db = tmp_path / "sessions.db"
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE session_state SET last_event_ts=?", (time.time() - 3 * DAY,))
    con.close()
    code, text = run("--config", str(cfg_path), "report", "--json")
    rep = json.loads(text)
    assert rep["namespaces"][NS_A]["open_forks"] == 1
    assert rep["namespaces"][NS_A]["references"] == 4  # map 0002 0003 + fork 0001 0002
    code, text = run(
        "--config",
        str(cfg_path),
        "close-idle",
        "--older-than",
        "1d",
        "--namespace",
        "qwen",
        "--yes",
    )
    assert code == 0
    con = sqlite3.connect(db)
    # Only the chunk the fork does not hold is queued; the fork row stays.
    assert sorted(con.execute("SELECT chunk_hash, mode FROM ns_evict_outbox")) == [
        ("0003", "delete")
    ]
    assert [r[0] for r in con.execute("SELECT session_id FROM forks ORDER BY fork_id")] == [
        "parent",
        "olds",
    ]
    con.close()
    code, text = run(
        "--config", str(write_config(tmp_path, fake.url)), "purge-namespace", NS_OLD, "--yes"
    )
    assert code == 0 and "end fork 2 of olds" in text
    con = sqlite3.connect(db)
    assert [r[0] for r in con.execute("SELECT session_id FROM forks")] == ["parent"]
    assert sorted(
        con.execute("SELECT chunk_hash FROM ns_evict_outbox WHERE namespace=?", (NS_OLD,))
    ) == [("0007",)]
    con.close()
    async with Rig(load(str(cfg_path))[0]) as r:  # the daemon agrees with the file
        m = r.svc.namespaces.managers[NS_A]
        assert m.refcounts.as_dict() == {"0001": 1, "0002": 1}
        assert [f.session_id for f in m.forks.values()] == ["parent"]
