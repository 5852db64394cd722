"""The store's files under faults, with real daemon processes: a second daemon on the same
file, a corrupt or empty file at start-up, the file or its WAL deleted while running."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from support.daemon_proc import DaemonProcess, run_to_exit, write_config
from support.disk_full import fill, tmpfs

START_TIMEOUT_S = 60  # a daemon that never exits (the bug) fails the test, never hangs it


def turn_end(sid: str, hashes: list[str], **extra: object) -> dict[str, object]:
    return {
        "type": "turn_end",
        "session_id": sid,
        "kv_transfer_params": {"chunk_hashes": hashes},
        **extra,
    }


def stored_maps(path: Path) -> dict[str, list[str]]:
    """session id -> stored map, read straight from the file (as a restart would)."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT session_id, map_json FROM sessions").fetchall()
    finally:
        con.close()
    import json

    return {sid: json.loads(m) for sid, m in rows}


def start_once(tmp_path: Path, store: Path) -> subprocess.CompletedProcess[str]:
    """Run a daemon on ``store`` in the foreground until it exits by itself."""
    cfg = write_config(tmp_path / "once.toml", {"debug_dir": str(tmp_path / "dbg")})
    return run_to_exit(store, cfg, timeout=START_TIMEOUT_S)


# ---- one daemon per store ----------------------------------------------------------------
def test_second_daemon_on_the_same_store_refuses_naming_file_and_pid(daemon_proc_factory) -> None:
    first = daemon_proc_factory()
    assert first.post(turn_end("a", ["x"]))[1]["ok"] is True
    proc = start_once(first.workdir, first.store)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert f"session store {first.store} is in use by pid {first.proc.pid} (ram-a-kv)" in out
    assert "refusing to start a second daemon" in out
    # The first one is untouched and keeps serving.
    assert first.post(turn_end("a", ["x", "y"]))[1]["ok"] is True
    # kill -9 leaves the lock file behind, but the kernel dropped the lock: a restart works.
    first.kill()
    first.start()
    assert first.event("session_map", session_id="a")["data"]["chunk_hashes"] == ["x", "y"]


def test_symlinked_path_shares_the_lock(daemon_proc_factory, tmp_path: Path) -> None:
    first = daemon_proc_factory()
    link = tmp_path / "link.db"
    link.symlink_to(first.store)
    proc = start_once(tmp_path, link)
    assert proc.returncode == 1 and f"pid {first.proc.pid}" in proc.stdout + proc.stderr


# ---- a corrupt or empty store at start-up ------------------------------------------------------
@pytest.fixture(scope="module")
def good_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of 40 sessions x 200 hashes (many pages), cleanly stopped (WAL folded in)."""
    d = DaemonProcess(tmp_path_factory.mktemp("seed"))
    with d:
        for i in range(40):
            hashes = [f"{i:03d}-{j:04d}-" + "f" * 40 for j in range(200)]
            assert d.post(turn_end(f"s{i}", hashes))[1]["ok"] is True
        assert d.stop() == 0
    assert not Path(str(d.store) + "-wal").exists()
    return d.store


def corrupt(kind: str, src: Path, dst: Path) -> None:
    data = bytearray(src.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    rng = random.Random(kind)
    if kind == "empty":
        data = bytearray()
    elif kind == "truncated":
        data = data[: len(data) // 2 + 123]
    elif kind == "garbage header":
        data[0:100] = rng.randbytes(100)
    elif kind.startswith("garbage page"):
        n = len(data) // page
        index = {
            "garbage page (first table page)": 1,
            "garbage page (middle)": n // 2,
            "garbage page (last)": n - 1,
        }[kind]
        data[index * page : (index + 1) * page] = rng.randbytes(page)
    dst.write_bytes(bytes(data))


KINDS = [
    "empty",
    "truncated",
    "garbage header",
    "garbage page (first table page)",
    "garbage page (middle)",
    "garbage page (last)",
]


@pytest.mark.parametrize("kind", KINDS)
def test_corrupt_store_exits_non_zero_naming_the_file(
    good_store: Path, tmp_path: Path, kind: str
) -> None:
    store = tmp_path / "sessions.db"
    corrupt(kind, good_store, store)
    before = store.read_bytes()
    proc = start_once(tmp_path, store)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert "cannot start:" in out and str(store) in out, out[-2000:]
    if kind == "empty":
        assert "is empty (0 bytes)" in out
    assert store.read_bytes() == before  # nothing was written into the broken file


def test_the_intact_copy_starts(good_store: Path, tmp_path: Path) -> None:
    """The control: the file the corruptions start from is a good store."""
    store = tmp_path / "sessions.db"
    shutil.copy(good_store, store)
    with DaemonProcess(tmp_path / "d", store=store) as d:
        assert len(d.event("list_sessions")["data"]["sessions"]) == 40


# ---- files deleted while running ------------------------------------------------------------
DELETIONS = {
    "file, WAL and index": ("", "-wal", "-shm"),
    "file only": ("",),
    "WAL only": ("-wal",),
}


@pytest.mark.parametrize("what", list(DELETIONS))
def test_deleted_store_is_rewritten_and_nothing_acknowledged_is_lost(
    daemon_proc_factory, what: str
) -> None:
    d = daemon_proc_factory()
    for i in range(20):
        assert d.post(turn_end(f"before{i}", [f"b{i}", "shared"]))[1]["ok"] is True
    for suffix in DELETIONS[what]:
        os.unlink(str(d.store) + suffix)
    acked = []
    for i in range(30):
        status, body = d.post(turn_end(f"after{i}", [f"a{i}", "shared"]))
        assert status == 200 and body["ok"] is True, body
        acked.append(f"after{i}")
    log = d.log()
    assert "while the daemon was running: rewriting it from the open database" in log
    assert "rewritten: nothing committed was lost" in log
    d.kill()  # no clean shutdown: only what is in the file at the path counts
    maps = stored_maps(d.store)
    assert set(maps) == {f"before{i}" for i in range(20)} | set(acked)
    assert maps["after29"] == ["a29", "shared"]
    d.start()
    assert d.event("session_map", session_id="before3")["data"]["chunk_hashes"] == ["b3", "shared"]
    status, body = d.post(turn_end("later", ["z"]))
    assert body["ok"] is True


def test_deletion_is_repaired_between_commits_too(daemon_proc_factory) -> None:
    """No event after the deletion: the idle check rewrites the file, so a kill -9 soon
    after still finds everything that was acknowledged before it."""
    import time

    d = daemon_proc_factory()
    for i in range(10):
        assert d.post(turn_end(f"s{i}", [f"h{i}"]))[1]["ok"] is True
    for suffix in ("", "-wal", "-shm"):
        os.unlink(str(d.store) + suffix)
    deadline = time.monotonic() + 30
    while "rewritten: nothing committed was lost" not in d.log():
        assert time.monotonic() < deadline, d.log()[-2000:]
        time.sleep(0.05)
    d.kill()
    assert set(stored_maps(d.store)) == {f"s{i}" for i in range(10)}


def test_store_replaced_by_another_file_refuses_writes(daemon_proc_factory, tmp_path) -> None:
    d = daemon_proc_factory()
    assert d.post(turn_end("a", ["x"]))[1]["ok"] is True
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    # An operator "restoring" another file: the old WAL and index go, the file is swapped.
    for suffix in ("-wal", "-shm"):
        os.unlink(str(d.store) + suffix)
    os.replace(other, d.store)
    for sid in ("b", "c"):
        status, body = d.post(turn_end(sid, ["y"]))
        assert status == 503 and body["ok"] is False
        assert f"session store {d.store} was replaced by another file" in body["error"]
    assert "was replaced by another file while the daemon was running" in d.log()
    # Reads still answer, from the state that was acknowledged; the file is left alone.
    assert d.event("session_map", session_id="a")["data"]["chunk_hashes"] == ["x"]
    assert d.event("session_map", session_id="b")["ok"] is False
    con = sqlite3.connect(d.store)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master")] == ["t"]
    con.close()
    status, ready = d.get("/readyz")
    assert status == 503 and ready["checks"]["store"]["ok"] is False


# ---- /readyz follows the store ---------------------------------------------------------------
async def test_readyz_fails_while_commits_fail_and_recovers(start_daemon, make_config) -> None:
    from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
    from ramakv_daemon.ports import WriteBatch

    class FullStore(SqliteSessionStore):
        full = False

        async def write(self, batch: WriteBatch) -> None:
            if self.full:
                raise sqlite3.OperationalError("database or disk is full")
            await super().write(batch)

    cfg = make_config()
    store = FullStore(cfg.session_store_path)
    d = await start_daemon(cfg, store=store)

    async def ready() -> tuple[int, dict]:
        resp = await d.client.get("/readyz")
        return resp.status, await resp.json()

    assert (await ready())[0] == 200
    store.full = True
    status, _ = await d.post(turn_end("s", ["a"]))
    assert status == 503
    status, body = await ready()
    assert status == 503 and body["checks"]["store"] == {
        "ok": False,
        "detail": "the last commit failed: persistence failed: database or disk is full",
    }
    assert body["checks"]["backend"]["ok"] and body["checks"]["outbox"]["ok"]
    store.full = False
    assert (await d.post(turn_end("s", ["a"])))[0] == 200
    assert (await ready())[0] == 200


@pytest.mark.parametrize(("sync", "thread"), [("NORMAL", False), ("NORMAL", True), ("FULL", False)])
async def test_rewrite_works_in_every_commit_mode(tmp_path: Path, sync: str, thread: bool):
    """The store alone: commits on the loop or on the writer thread, fsync or not."""
    from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
    from ramakv_daemon.core.session import Session
    from ramakv_daemon.ports import WriteBatch

    path = tmp_path / "s.db"
    store = SqliteSessionStore(str(path), sync, thread)
    await store.open()
    try:
        await store.write(WriteBatch({"a": Session("a", ("x",))}))
        for suffix in ("", "-wal", "-shm"):
            os.unlink(str(path) + suffix)
        await store.write(WriteBatch({"b": Session("b", ("y",))}))
        await store.write(WriteBatch({"c": Session("c", ("z",))}))
        assert store.problem() is None
        assert stored_maps(path) == {"a": ["x"], "b": ["y"], "c": ["z"]}
    finally:
        await store.close()


def test_readyz_fails_while_the_store_disk_is_full(daemon_proc_factory, tmp_path: Path) -> None:
    with tmpfs(
        tmp_path / "fs",
        "size=4m,mode=0755",
        "cannot mount a tmpfs here ({why}); the disk-full probe test needs one",
    ) as fs:
        d = daemon_proc_factory(store=fs / "sessions.db")
        try:
            assert d.get("/readyz")[0] == 200
            fill(fs / "filler")
            status, body = d.get("/readyz")
            assert status == 503 and "bytes free" in body["checks"]["store"]["detail"]
            assert d.get("/healthz")[0] == 200
            (fs / "filler").unlink()
            assert d.get("/readyz")[0] == 200
        finally:
            d.kill()


async def test_a_new_store_appears_whole(tmp_path: Path) -> None:
    """Built under a temporary name and renamed: a crash while creating it leaves at most a
    stale "<store>.new" (removed by the next start), never a 0-byte store."""
    from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore

    path = tmp_path / "s.db"
    (tmp_path / "s.db.new").write_bytes(b"half-written by a crashed start")
    store = SqliteSessionStore(str(path))
    await store.open()
    await store.close()
    assert not (tmp_path / "s.db.new").exists()
    con = sqlite3.connect(path)
    assert "sessions" in {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    con.close()
