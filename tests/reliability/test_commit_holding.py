"""One slow cache never stalls other sessions' writes: a commit waiting for a keep waits
alone (with the changes that touch what it touched); every other change commits past it,
order within a session is kept, and nothing acknowledged depends on a change in doubt."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from support.daemon_app import DaemonClient
from support.lmcache_server import FakeLMCacheServer
from support.reliability import db_model

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.commit.record import ChangeRecord
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.ports import StoreError, WriteBatch

GUARD_S = 60.0  # hang guards only: an unrelated commit needs milliseconds


async def until(pred: Any) -> None:
    """Await ``pred()`` (polled; a hang guard bounds it)."""
    for _ in range(int(GUARD_S / 0.01)):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def keeps_received(fake: FakeLMCacheServer) -> int:
    return len([r for r in fake.requests if r.path == "/memory/keep"])


async def test_a_commit_waiting_for_its_keep_waits_alone(
    start_daemon: Any, make_config: Any, fake_lmcache: FakeLMCacheServer
) -> None:
    fake = fake_lmcache
    fake.defers = True  # ascend_ext's memory API: deferred deletes, keeps, deadlines
    d: DaemonClient = await start_daemon(
        noop_backend=False, lmcache_url=fake.url, backend_timeout_s=2.0, evict_defer_s=60.0
    )
    path = d.config.session_store_path
    fake.put(["aa", "bb", "c1"])
    await d.turn_end("C", ["c1"])
    await d.turn_end("A", ["aa", "bb"])
    await d.turn_end("A", ["bb"])  # aa drops to 0: its deferred delete is sent
    dispatcher = d.daemon.default.dispatcher
    await until(
        lambda: (
            dispatcher.backlog == 0
            and any(
                "aa" in (r.body or {}).get("chunk_hashes", [])
                for r in fake.requests
                if r.path == "/memory/evict"
            )
        )
    )
    fake.keep_hold = asyncio.Event()  # the cache is slow to answer keeps
    b1 = asyncio.ensure_future(d.turn_end("B", ["aa"]))  # aa again: its commit needs a keep
    await until(lambda: keeps_received(fake) >= 1)
    b2 = asyncio.ensure_future(d.turn_end("B", ["aa", "b2"]))  # B's next turn: after b1
    e = asyncio.ensure_future(d.turn_end("E", ["aa"]))  # moves aa's refcount: after b1 too
    # Unrelated sessions commit and are answered while the keep is out.
    await asyncio.wait_for(d.turn_end("C", ["c1", "c2"]), GUARD_S)
    await asyncio.wait_for(d.turn_end("F", ["f1"]), GUARD_S)
    await asyncio.wait_for(d.ok("session_close", session_id="A"), GUARD_S)  # drops bb
    stored = db_model(path)
    assert stored["C"].chunk_hashes == ["c1", "c2"] and stored["F"].chunk_hashes == ["f1"]
    assert "A" not in stored
    assert not (b1.done() or b2.done() or e.done())
    assert "B" not in stored and "E" not in stored  # in doubt: nothing of them in the file
    fake.keep_hold.set()
    await asyncio.wait_for(asyncio.gather(b1, b2, e), GUARD_S)
    stored = db_model(path)
    assert stored["B"].chunk_hashes == ["aa", "b2"] and stored["B"].turn_count == 2
    assert stored["E"].chunk_hashes == ["aa"]
    assert d.daemon.default.manager.refcounts.get("aa") == 2
    assert "aa" in fake.tiers  # kept: the keep reached the cache before the deferral ended


class FailingStore(SqliteSessionStore):
    """A real store whose next commit fails, when told, as SQLite does when locked."""

    fail_next = False

    async def write(self, batch: WriteBatch) -> None:
        if self.fail_next:
            self.fail_next = False
            raise sqlite3.OperationalError("database is locked")
        await super().write(batch)


async def test_a_held_change_rolled_back_takes_only_what_depends_on_it(tmp_path: Path) -> None:
    """A waits for its keep; B (another session) commits past it; C (A's session) waits
    behind A. A's commit then fails: A and C are undone, B stays committed, and memory
    equals the file."""
    path = str(tmp_path / "s.db")
    store = FailingStore(path)
    await store.open()
    m = SessionManager()
    committer = GroupCommitter(store, m.fork_ids)
    committer.start()
    loop = asyncio.get_running_loop()
    try:
        await committer.submit(ChangeRecord.of("", m.turn_end("base", ["x"], 1.0), m))
        gate: asyncio.Future[None] = loop.create_future()
        a = committer.submit(ChangeRecord.of("", m.turn_end("A", ["x", "y"], 2.0), m, gate=gate))
        b = committer.submit(ChangeRecord.of("", m.turn_end("B", ["z"], 3.0), m))
        c = committer.submit(ChangeRecord.of("", m.turn_end("A", ["y"], 4.0), m))
        await asyncio.wait_for(b, GUARD_S)  # committed past A, which waits for its keep
        assert not a.done() and not c.done() and committer.busy
        assert set(db_model(path)) == {"base", "B"}
        store.fail_next = True
        gate.set_result(None)  # the keep's answer: A and C commit together, and fail
        for fut in (a, c):
            try:
                await asyncio.wait_for(fut, GUARD_S)
            except StoreError as err:
                assert "database is locked" in str(err)
            else:
                raise AssertionError("a failed commit was acknowledged")
        assert set(m.sessions) == {"base", "B"}
        assert dict(m.refcounts.counts) == {"x": 1, "z": 1}
        assert set(db_model(path)) == {"base", "B"} and not committer.busy
    finally:
        await committer.close()
        await store.close()


async def test_a_slow_cache_of_one_deployment_holds_no_commit_of_another(
    tmp_path: Path, two_fakes: tuple[FakeLMCacheServer, FakeLMCacheServer]
) -> None:
    """Deployment qwen's cache answers keeps late; llama's sessions commit meanwhile, the
    same chunk hash included (a chunk of another namespace is another chunk)."""
    from support.ns_rig import Rig, config, ident

    fa, fb = two_fakes
    fa.defers = fb.defers = True
    cfg = config(
        tmp_path,
        [
            {"name": "qwen", **ident(), "lmcache_url": fa.url},
            {
                "name": "llama",
                **ident(model_id="meta-llama/Llama-3.1-8B", tokenizer_name="llama"),
                "lmcache_url": fb.url,
            },
        ],
        evict_defer_s=60.0,
        backend_timeout_s=2.0,
    )
    async with Rig(cfg) as r:
        await r.turn_end("qa", ["0a01", "0a02"], namespace="qwen")
        await r.turn_end("qa", ["0a02"], namespace="qwen")  # 0a01's deferred delete
        await until(lambda: "0a01" in fa.deferred.pending)
        fa.keep_hold = asyncio.Event()
        held = asyncio.ensure_future(r.turn_end("qb", ["0a01"], namespace="qwen"))
        await until(lambda: keeps_received(fa) >= 1)
        for turn in range(3):
            await asyncio.wait_for(
                r.turn_end("lb", ["0a01", f"0b0{turn}"], namespace="llama"), GUARD_S
            )
        assert db_model(cfg.session_store_path)["lb"].chunk_hashes == ["0a01", "0b02"]
        assert not held.done()
        fa.keep_hold.set()
        await asyncio.wait_for(held, GUARD_S)
        assert db_model(cfg.session_store_path)["qb"].chunk_hashes == ["0a01"]
