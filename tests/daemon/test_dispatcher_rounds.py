"""One delivery round with several batches: each batch is checked again just before its call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ramakv_daemon.commit.ledger import OutboxLedger
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.delivery.delivery_state import NamespaceState
from ramakv_daemon.delivery.dispatcher import BackendDispatcher
from ramakv_daemon.ports import Backend, BackendResult, ChunkLocations, EvictMode


class GatedBackend(Backend):
    """A backend whose DELETE calls wait for a gate: the round's later batches wait too."""

    name = "gated"

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.gate = asyncio.Event()
        self.called = asyncio.Event()  # the first evict has reached the backend

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        self.calls.append((mode.value, list(chunk_hashes)))
        self.called.set()
        if mode is EvictMode.DELETE:
            await self.gate.wait()
        return BackendResult(ok=True, status=200)

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        return BackendResult(ok=True, status=200)

    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        return BackendResult(ok=True, status=200), ChunkLocations()

    async def close(self) -> None:
        return None


async def test_a_chunk_referenced_during_an_earlier_batch_is_not_evicted() -> None:
    manager, backend, ledger = (
        SessionManager(),
        GatedBackend(),
        OutboxLedger(),
    )  # no commit in flight
    d = BackendDispatcher(backend, NamespaceState(manager, ledger))
    d.evictions_committed(["a"], ["b"], row=1)
    round_ = asyncio.create_task(d.delivery.deliver_due())
    await backend.called.wait()  # DELETE [a] is out
    manager.turn_end("s", ["b"])  # b is wanted again (committed: the committer is idle)
    backend.gate.set()
    await round_
    assert backend.calls == [("delete", ["a"])]
    assert d.backlog == 0 and ledger.take_retired() == [1]  # b's intent dropped, row done


async def test_an_intent_replaced_during_an_earlier_batch_is_delivered_as_the_new_one() -> None:
    manager, backend, ledger = (
        SessionManager(),
        GatedBackend(),
        OutboxLedger(),
    )  # no commit in flight
    d = BackendDispatcher(backend, NamespaceState(manager, ledger))
    d.evictions_committed(["a"], ["b"], row=1)  # b: demote
    round_ = asyncio.create_task(d.delivery.deliver_due())
    await backend.called.wait()  # DELETE [a] is out
    d.evictions_committed(["b"], [], row=2)  # meanwhile b's newer intent: delete
    backend.gate.set()
    await round_
    await d.delivery.deliver_due()
    assert backend.calls == [("delete", ["a"]), ("delete", ["b"])]
    assert d.backlog == 0 and sorted(ledger.take_retired()) == [1, 2]
