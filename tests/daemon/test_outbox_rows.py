"""The eviction outbox on disk: one row per group commit, deleted once nothing in it waits."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from support.daemon_app import RecordingBackend

from ramakv_daemon.adapters.sqlite.store import outbox_view
from ramakv_daemon.ports import BackendResult, EvictMode


class FlakyBackend(RecordingBackend):
    """Records calls; refuses evictions of the hashes in ``refuse``."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: set[str] = set()

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        if self.refuse & set(chunk_hashes):
            return BackendResult(ok=False, status=503, detail="no engine")
        return await super().evict(chunk_hashes, mode)


def rows(path: str) -> list[tuple[int, str]]:
    con = sqlite3.connect(path)
    try:
        return list(con.execute("SELECT id, entries_json FROM evict_log ORDER BY id"))
    finally:
        con.close()


# Hang guards: the longest a test waits for the daemon's next store write, and how many
# writes it looks after.
WRITE_WAIT_S = 60.0
LOOKS = 1000


@contextlib.contextmanager
def noting_writes(d: Any) -> Iterator[asyncio.Event]:
    """An event set each time the daemon's store finishes a write, for the block."""
    store = d.daemon.store
    write = store.write
    finished = asyncio.Event()

    async def noting(batch: Any) -> None:
        try:
            await write(batch)
        finally:
            finished.set()

    store.write = noting
    try:
        yield finished
    finally:
        del store.write  # the class's method again


async def until_written(d: Any, settled: Callable[[], Awaitable[bool]]) -> None:
    """Until ``settled()``; between looks, the daemon's next store write (what can change
    the answer: a commit, or the deletion of rows delivery retired)."""
    with noting_writes(d) as finished:
        for _ in range(LOOKS):
            finished.clear()  # before the look: a write during it wakes the wait at once
            if await settled():
                return
            try:
                await asyncio.wait_for(finished.wait(), WRITE_WAIT_S)
            except TimeoutError:
                raise AssertionError("no store write came and the condition still fails") from None
    raise AssertionError(f"the condition still fails after {LOOKS} store writes")


async def settle(d: Any) -> None:
    """Delivery drained and what it left for the committer (retired rows) written: until
    neither has work (while either has, a store write is to come)."""
    committer = d.daemon.committer

    async def settled() -> bool:
        await d.daemon.default.dispatcher.drain()
        await committer.barrier()
        return not committer.ledger.has_retired and not committer.busy

    await until_written(d, settled)


async def test_one_row_per_commit_and_deleted_when_delivered(
    start_daemon: Any, make_config: Any
) -> None:
    cfg = make_config()
    backend = FlakyBackend()
    d = await start_daemon(cfg, backend=backend)
    hashes = [f"h{i}" for i in range(40)]
    await d.turn_end("s", hashes)
    await d.turn_end("s", hashes[:10])  # drops 30: one row with 30 entries, not 30 rows
    await settle(d)
    assert sorted(backend.of("delete")) == sorted(hashes[10:])
    assert rows(cfg.session_store_path) == []  # delivered: the row is gone


async def test_a_row_stays_while_one_entry_waits_and_survives_restart(
    start_daemon: Any, make_config: Any
) -> None:
    cfg = make_config()
    backend = FlakyBackend()
    backend.refuse = {"stuck"}
    d = await start_daemon(cfg, backend=backend)
    await d.turn_end("a", ["ok1", "stuck"])
    await d.ok("session_close", session_id="a")
    await settle(d)
    # "stuck" was refused (sent in the same call as ok1, so both wait; nothing is lost).
    stored = rows(cfg.session_store_path)
    # As the committer's rows were stored before they were typed (test_contract_stored_format).
    assert [entries for _, entries in stored] == ['[["ok1","delete"],["stuck","delete"]]']
    con = sqlite3.connect(cfg.session_store_path)
    assert outbox_view(con) == {("", "ok1"): "delete", ("", "stuck"): "delete"}
    con.close()
    await d.close()
    backend2 = FlakyBackend()
    d2 = await start_daemon(cfg, backend=backend2)
    await settle(d2)
    assert sorted(backend2.of("delete")) == ["ok1", "stuck"]
    assert rows(cfg.session_store_path) == []


async def test_re_evicted_hash_moves_to_the_newer_row(start_daemon: Any, make_config: Any) -> None:
    cfg = make_config()
    backend = FlakyBackend()
    backend.refuse = {"x"}
    d = await start_daemon(cfg, backend=backend)
    d.daemon.default.dispatcher.delivery.max_backoff_s = 0.2  # retried soon after the heal
    await d.turn_end("a", ["x", "y"])
    await d.ok("session_close", session_id="a")  # row 1: x, y (x refused, y with it)
    await settle(d)
    await d.turn_end("b", ["x"])  # x referenced again: its old intent must not be sent
    await settle(d)
    await d.ok("session_close", session_id="b")  # row 2: x again
    backend.refuse = set()  # the retry after the backoff delivers x

    async def x_delivered_and_its_row_gone() -> bool:
        return bool(backend.of("delete").count("x")) and not rows(cfg.session_store_path)

    await until_written(d, x_delivered_and_its_row_gone)  # the row's deletion is a write
    await settle(d)
    assert backend.of("delete").count("x") == 1
    assert rows(cfg.session_store_path) == []
