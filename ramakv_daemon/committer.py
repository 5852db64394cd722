"""Group commit: concurrent events share one SQLite transaction; a reply waits for it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.ports import SessionStore, StoreError

log = logging.getLogger("ramakv.store")


class GroupCommitter:
    """Batches the store writes of applied changes and resolves each when durable.

    Memory is changed first (the core is synchronous), so a failed commit must undo
    every change not yet durable — the failed batch and all queued behind it, newest
    first — leaving memory equal to what the database holds.
    """

    def __init__(
        self,
        store: SessionStore,
        manager: SessionManager,
        on_commit: Callable[[float, int], None] | None = None,
    ) -> None:
        self.store = store
        self.manager = manager
        self.on_commit = on_commit
        self._pending: list[tuple[Change, dict, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        """Start the writer task on the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit")

    def submit(self, change: Change) -> asyncio.Future[None]:
        """Queue ``change``'s touched sessions for the next commit; await the result."""
        writes = {sid: self.manager.sessions.get(sid) for sid in change.prev_sessions}
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((change, writes, fut))
        self._wake.set()
        return fut

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not self._pending:
                if self._closing:
                    return
                continue
            batch, self._pending = self._pending, []
            merged: dict = {}
            for _, writes, _ in batch:
                merged.update(writes)
            started = time.perf_counter()
            try:
                await self.store.write(merged)
            except Exception as err:  # noqa: BLE001 - any failure must undo, not kill the loop
                failed = batch + self._pending
                self._pending = []
                for change, _, _ in reversed(failed):
                    self.manager.undo(change)
                error = (
                    err if isinstance(err, StoreError)
                    else StoreError(f"persistence failed: {err}")
                )
                log.error("commit of %d events failed, state rolled back: %s", len(failed), error)
                for _, _, fut in failed:
                    if not fut.done():
                        fut.set_exception(error)
                continue
            if self.on_commit is not None:
                self.on_commit(time.perf_counter() - started, len(batch))
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_result(None)

    async def close(self) -> None:
        """Commit what is queued, then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=10)
            except TimeoutError:
                self._task.cancel()
