"""Disk full / read-only database: writes answer ok:false, memory unchanged, reads keep working."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.daemon_app import DaemonClient
from support.daemon_proc import run_to_exit, write_config
from support.disk_full import fill, tmpfs
from support.reliability import daemon_state, set_query_only

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.ports import WriteBatch

BIG = [f"{i:02x}" * 45 for i in range(256)] + [f"{i:04x}" * 22 for i in range(700)]


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (skipped, with the reason, where mounting is not allowed)."""
    with tmpfs(
        tmp_path / "tiny",
        "size=2m,mode=0755",
        "cannot mount a tmpfs here ({why}); disk-full test needs one",
    ) as mnt:
        yield mnt


WRITES: list[dict[str, Any]] = [
    {"type": "turn_end", "session_id": "s1", "kv_transfer_params": {"chunk_hashes": BIG}},
    {"type": "turn_end", "session_id": "new", "kv_transfer_params": {"chunk_hashes": BIG}},
    {"type": "session_fork", "session_id": "big"},
    {"type": "session_close", "session_id": "big"},
    {"type": "session_suspend", "session_id": "big"},
    {"type": "session_fork_end", "session_id": "s2"},
    {"type": "snapshot_restore", "session_id": "copy", "source_session_id": "big"},
    # Its time is stored (the idle clock counts from it after a restart): a write too.
    {"type": "turn_start", "session_id": "s1"},
]


async def seed(d: DaemonClient) -> None:
    await d.turn_end("s1", ["sys", "a", "b"])
    await d.turn_end("s2", ["sys", "c"])
    await d.ok("session_fork", session_id="s2")
    await d.turn_end("s3", ["z"])
    await d.ok("session_suspend", session_id="s3")
    await d.turn_end("big", BIG[:500])


async def assert_reads_work(d: DaemonClient) -> None:
    assert await d.ok("health") == {"status": "running", "sessions_count": 4}
    assert (await d.ok("session_map", session_id="s1"))["chunk_hashes"] == ["sys", "a", "b"]
    assert (await d.ok("session_map", session_id="s3"))["chunk_hashes"] == ["z"]
    # A session the daemon does not know: the turn_start stores nothing, and answers.
    assert (await d.ok("turn_start", session_id="unknown"))["prefetch_count"] == 0
    assert (await d.ok("list_sessions"))["total"] == 4
    info = await d.ok("chunk_info", chunk_hashes=["sys"])
    assert info["chunks"]["sys"]["refcount"] == 3
    resp = await d.client.get("/metrics")
    assert resp.status == 200


async def assert_writes_refused(d: DaemonClient, error: str) -> None:
    """Every write fails with a clear error; memory and file stay exactly as they were."""
    before = daemon_state(d.daemon)
    for w in WRITES:  # one at a time: see test_read_during_a_failing_commit below
        status, body = await d.post(w)
        assert status == 503, (w["type"], body)
        assert body["ok"] is False and "data" not in body, body
        assert body["error"].startswith("persistence failed:") and error in body["error"], body
    assert daemon_state(d.daemon) == before
    d.assert_consistent()


async def test_disk_full_on_a_tiny_tmpfs(
    tiny_fs: Path, start_daemon: Any, make_config: Any
) -> None:
    cfg = make_config(session_store_path=str(tiny_fs / "sessions.db"))
    d = await start_daemon(cfg)
    await seed(d)
    filler = tiny_fs / "filler"
    assert fill(filler) > 0
    await assert_writes_refused(d, "database or disk is full")
    await assert_reads_work(d)
    status, body = await d.post({**WRITES[0], "event_id": "retry-me"})
    assert status == 503 and body["ok"] is False  # a failure is not remembered

    filler.unlink()  # space returns
    before = (await d.ok("list_sessions"))["sessions"]
    turns = {r["session_id"]: r["turn_count"] for r in before}
    status, body = await d.post({**WRITES[0], "event_id": "retry-me"})
    assert status == 200 and body["ok"] is True, body
    status, again = await d.post({**WRITES[0], "event_id": "retry-me"})
    assert again == body
    await d.ok("session_close", session_id="big")
    d.assert_consistent()
    expected = daemon_state(d.daemon)
    await d.close()

    d2 = await start_daemon(cfg)
    assert daemon_state(d2.daemon)["sessions"] == expected["sessions"]
    assert daemon_state(d2.daemon)["refcounts"] == expected["refcounts"]
    rows = {r["session_id"]: r["turn_count"] for r in (await d2.ok("list_sessions"))["sessions"]}
    assert rows["s1"] == turns["s1"] + 1  # the retried event applied once
    assert "big" not in rows


async def test_read_only_database(start_daemon: Any) -> None:
    d = await start_daemon()
    await seed(d)
    store = d.daemon.store
    await set_query_only(store, True)  # SQLite refuses every write: SQLITE_READONLY
    await assert_writes_refused(d, "readonly database")
    await assert_reads_work(d)
    await set_query_only(store, False)
    await d.turn_end("s1", ["sys", "a", "b", "d"])
    assert (await d.ok("session_map", session_id="s1"))["chunk_hashes"][-1] == "d"
    d.assert_consistent()


class FullStore(SqliteSessionStore):
    """A real store whose commits fail with SQLite's disk-full error while ``full`` is set."""

    def __init__(self, path: str, commit_thread: bool = False) -> None:
        super().__init__(path, commit_thread=commit_thread)
        self.full = False

    async def write(self, batch: WriteBatch) -> None:
        if self.full:
            await asyncio.sleep(0.005)  # let concurrent events queue behind this batch
            import sqlite3

            raise sqlite3.OperationalError("database or disk is full")
        await super().write(batch)


@pytest.fixture
async def full_disk(start_daemon: Any, make_config: Any) -> tuple[DaemonClient, FullStore]:
    """A seeded daemon on a :class:`FullStore` whose commits now fail (``full`` is set)."""
    cfg = make_config()
    store = FullStore(cfg.session_store_path)
    d = await start_daemon(cfg, store=store)
    await seed(d)
    store.full = True
    return d, store


async def test_concurrent_writes_on_a_full_disk_all_roll_back(
    full_disk: tuple[DaemonClient, FullStore],
) -> None:
    d, store = full_disk
    before = daemon_state(d.daemon)
    burst = (
        [
            {
                "type": "turn_end",
                "session_id": f"s{i % 7}",
                "kv_transfer_params": {"chunk_hashes": ["sys", f"h{i}", f"h{i + 1}"]},
            }
            for i in range(60)
        ]
        + [{"type": "session_fork", "session_id": "s2"}] * 5
        + [
            {"type": "session_close", "session_id": "s1"},
            {"type": "session_suspend", "session_id": "big"},
        ]
    )
    answers = await asyncio.gather(*(d.post(e) for e in burst))
    assert all(s == 503 and not b["ok"] and "disk is full" in b["error"] for s, b in answers)
    assert daemon_state(d.daemon) == before
    await assert_reads_work(d)
    store.full = False
    answers = await asyncio.gather(*(d.post(e) for e in burst))
    assert all(s == 200 and b["ok"] for s, b in answers), answers
    d.assert_consistent()


def test_start_on_a_read_only_mount_refuses_with_a_message(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "size=1m,ro", "cannot mount a read-only tmpfs here ({why})") as ro:
        cfg = write_config(tmp_path / "c.toml", {"debug_dir": str(tmp_path / "dbg")})
        proc = run_to_exit(ro / "sessions.db", cfg, timeout=30)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "cannot open session store" in out, out[-2000:]


async def test_read_during_a_failing_commit_sees_only_durable_state(
    full_disk: tuple[DaemonClient, FullStore],
) -> None:
    d, _ = full_disk
    (s1, close), (s2, suspend), (s3, smap) = await asyncio.gather(
        d.post({"type": "session_close", "session_id": "big"}),
        d.post({"type": "session_suspend", "session_id": "big"}),
        d.post({"type": "session_map", "session_id": "big"}),
    )
    assert s1 == 503 and close["ok"] is False
    assert "big" in d.daemon.default.manager.sessions  # the close was rolled back
    # The events behind it waited for that commit and answered from durable state: the
    # read sees the session; the suspend is a real write and fails while the disk is full.
    assert smap["ok"] is True, smap
    assert s2 == 503 and suspend["ok"] is False, suspend


@pytest.mark.parametrize("commit_thread", [False, True])
async def test_reads_during_a_burst_on_a_full_disk_see_only_acknowledged_maps(
    commit_thread: bool, start_daemon: Any, make_config: Any
) -> None:
    """Disk full: every write answers 503, and not one of the concurrent reads (session_map,
    list_sessions, chunk_info, health) returns a map or count that no acknowledged event
    produced, with commits on the loop or on the writer thread."""
    cfg = make_config(sqlite_commit_thread=commit_thread)
    store = FullStore(cfg.session_store_path, commit_thread)
    d = await start_daemon(cfg, store=store)
    await seed(d)
    store.full = True
    writes = [
        {
            "type": "turn_end",
            "session_id": f"s{i % 3 + 1}",
            "kv_transfer_params": {"chunk_hashes": ["sys", f"n{i}"]},
        }
        for i in range(40)
    ] + [
        {"type": "session_close", "session_id": "s2"},
        {"type": "turn_end", "session_id": "new", "kv_transfer_params": {"chunk_hashes": ["sys"]}},
    ]
    reads = [{"type": "session_map", "session_id": f"s{i % 3 + 1}"} for i in range(40)] + [
        {"type": "list_sessions"},
        {"type": "health"},
        {"type": "chunk_info", "chunk_hashes": ["sys", "n1"]},
    ] * 5
    mixed = [x for pair in zip(writes, reads, strict=False) for x in pair] + reads[len(writes) :]
    answers = await asyncio.gather(*(d.post(e) for e in mixed))
    acknowledged = {"s1": ["sys", "a", "b"], "s2": ["sys", "c"], "s3": ["z"]}
    for event, (status, body) in zip(mixed, answers, strict=True):
        if event in writes:
            assert status == 503, body
            continue
        assert status == 200 and body["ok"], body
        data = body["data"]
        if event["type"] == "session_map":
            assert data["chunk_hashes"] == acknowledged[event["session_id"]], data
        elif event["type"] == "list_sessions":
            assert data["total"] == 4 and "new" not in {r["session_id"] for r in data["sessions"]}
        elif event["type"] == "health":
            assert data["sessions_count"] == 4
        else:
            assert data["chunks"]["sys"]["refcount"] == 3 and data["chunks"]["n1"]["refcount"] == 0
