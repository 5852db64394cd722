"""The stock server's disk (fs L2) budget: over ``l2_budget_bytes``, dead chunks are deleted,
oldest first, through the server's all-tier delete and then from the folder itself."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ramakv_daemon.adapters.backends.lmcache_fs_l2 import Scan, remove, scan
from ramakv_daemon.core.l2_budget import L2Chunk, L2File, L2Plan, LastUsed, Referenced, plan_l2
from ramakv_daemon.pipeline.lanes import Lanes
from ramakv_daemon.ports import Backend, EvictMode
from ramakv_daemon.routing.namespaces import Namespace
from ramakv_daemon.sweeps import loop

log = logging.getLogger("ramakv")

# Chunks per delete call and per step of the loop: one server request each (the server
# takes 10,000 keys a call), and no step blocks client events for long.
SLICE = 500
WARN_EVERY_S = 60.0


def evidence(
    namespaces: Iterable[Namespace], clock: Callable[[], float]
) -> tuple[Referenced, LastUsed]:
    """What the budget asks the sessions' managers (issue 31's evidence, core/last_refs.py),
    in any of ``namespaces``: a chunk is referenced while a live session's map, a suspended
    session's stored map or an open fork names it, or two sessions shared it within
    ``retain_unreferenced_s`` (a shared prefix: never deleted, as the never-worse rules
    say); its last use (what orders the dead, oldest first) is its last reference or
    sharing, where the evidence has one (None: the file's mtime alone)."""

    def referenced(chunk_hash: str) -> bool:
        now = clock()
        for ns in list(namespaces):  # a copy: a pass may run on a thread
            m = ns.manager
            if chunk_hash in m.refcounts or chunk_hash in m.parked:
                return True
            if m.last_refs.shared_recently(chunk_hash, now):
                return True
        return False

    def last_used(chunk_hash: str) -> float | None:
        best: float | None = None
        for ns in list(namespaces):
            refs = ns.manager.last_refs
            released = refs.released.get(chunk_hash)
            for ts in (released[0] if released else None, refs.shared_at.get(chunk_hash)):
                if ts is not None and (best is None or ts > best):
                    best = ts
        return best

    return referenced, last_used


def deployment_scan(path: str | Path, model_name: str) -> tuple[Scan, Scan]:
    """The folder's scan split into this model's files and everyone else's (another
    deployment's, another model's: never this deployment's to delete)."""
    found = scan(path)
    mine = Scan([f for f in found.files if f.model_name == model_name], found.temporary)
    others = Scan([f for f in found.files if f.model_name != model_name])
    mine.other, mine.other_bytes = found.other, found.other_bytes
    return mine, others


@dataclass(slots=True)
class Deleted:
    """What deleting a plan's chunks did."""

    chunks: int = 0
    files: int = 0
    bytes: int = 0
    skipped_referenced: int = 0  # named again since the plan: kept
    server_failures: int = 0  # slices the server refused or missed (files removed here)


async def delete_chunks(
    path: str | Path,
    chunks: Sequence[L2Chunk],
    referenced: Referenced,
    backend: Backend | None,
    *,
    lanes: Lanes | None = None,
    slice_size: int = SLICE,
    progress: Callable[[Deleted], None] | None = None,
) -> Deleted:
    """Delete ``chunks`` in slices: each chunk named again since the plan is kept; the rest
    go through ``backend``'s all-tier delete (its L1 copies too), then any of their files
    still there (the server down, another rank or salt) are removed from the folder."""
    done = Deleted()
    for i in range(0, len(chunks), slice_size):
        async with lanes.background() if lanes is not None else contextlib.nullcontext():
            part = [c for c in chunks[i : i + slice_size] if not referenced(c.chunk_hash)]
            done.skipped_referenced += min(slice_size, len(chunks) - i) - len(part)
            if backend is not None and part:
                result = await backend.evict([c.chunk_hash for c in part], EvictMode.DELETE)
                if not result.ok:
                    done.server_failures += 1
                    log.warning(
                        "l2 budget: the server's delete failed (%s %s); removing the files",
                        result.status,
                        result.detail,
                    )
            files = [f for c in part for f in c.files]
            await asyncio.to_thread(_unlink_all, path, files)
            done.chunks += len(part)
            done.files += len(files)
            done.bytes += sum(c.size for c in part)
        if progress is not None:
            progress(done)
    return done


def _unlink_all(path: str | Path, files: Iterable[L2File]) -> None:
    for _ in remove(path, files):
        pass


@dataclass(slots=True)
class SweepResult:
    """One pass: the plan it made and what it deleted."""

    plan: L2Plan
    deleted: Deleted
    seconds: float


class L2BudgetSweep:
    """Measures the fs L2 folder every ``interval_s`` and, over budget, deletes dead
    chunks of this deployment's model, oldest first (never a referenced one; never
    anything when ``budget`` is 0)."""

    def __init__(
        self,
        path: str,
        model_name: str,
        budget: int,
        interval_s: float,
        referenced: Referenced,
        backend: Backend | None,
        *,
        last_used: LastUsed | None = None,
        grace_s: float = 0.0,
        lanes: Lanes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``backend``: the stock server's adapter (None: the files are removed directly).
        ``grace_s``: a chunk younger than this is never deleted (a turn in flight writes
        its chunks before its turn_end names them)."""
        self.path = path
        self.model_name = model_name
        self.budget = budget
        self.interval_s = max(1.0, interval_s)
        self.referenced = referenced
        self.backend = backend
        self.last_used = last_used
        self.grace_s = grace_s
        self.lanes = lanes
        self.clock = clock
        self.last: SweepResult | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._warned = float("-inf")
        self._failed = float("-inf")

    @property
    def on(self) -> bool:
        return bool(self.path) and self.budget > 0 and bool(self.model_name)

    async def start(self) -> None:
        """Start the loop (its first pass at once, in the background) when configured."""
        if self.on:
            self._task = asyncio.get_running_loop().create_task(self._forever(), name="l2-budget")

    async def close(self) -> None:
        await loop.stop(self._task)

    async def sweep(self) -> SweepResult:
        """One pass (a second caller waits for the pass under way, then makes its own)."""
        async with self._lock:
            started = time.perf_counter()
            # Scan and plan on a thread (a million files is seconds of work): the plan's
            # look at the refcounts may race an event, so each slice asks again on the loop
            # before deleting, and a chunk seen referenced is only kept a pass longer.
            plan = await asyncio.to_thread(self._plan)
            deleted = Deleted()
            if plan.delete:
                deleted = await delete_chunks(
                    self.path, plan.delete, self.referenced, self.backend, lanes=self.lanes
                )
                log.info(
                    "l2 budget: %s held %d bytes > %d: deleted %d dead chunks (%d files, "
                    "%d bytes), oldest first; %d named again meanwhile were kept",
                    self.path,
                    plan.bytes,
                    plan.budget,
                    deleted.chunks,
                    deleted.files,
                    deleted.bytes,
                    deleted.skipped_referenced,
                )
            now = self.clock()
            if plan.still_over and now - self._warned >= WARN_EVERY_S:
                self._warned = now  # once a minute: under pressure every pass is over
                log.warning(
                    "l2 budget: %s stays over its budget (%d > %d bytes): the rest is "
                    "referenced by sessions or forks (never deleted); raise l2_budget_bytes "
                    "or close sessions",
                    self.path,
                    plan.bytes_after,
                    plan.budget,
                )
            self.last = SweepResult(plan, deleted, time.perf_counter() - started)
            return self.last

    def _plan(self) -> L2Plan:
        mine, _ = deployment_scan(self.path, self.model_name)
        fresh = self.clock() - self.grace_s if self.grace_s > 0 else None
        return plan_l2(
            mine.files,
            self.referenced,
            self.budget,
            last_used=self.last_used,
            written_before=fresh,
            classify=False,
        )

    async def _forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except OSError as err:  # the folder missing or unreadable: say so, keep trying
                now = self.clock()
                if now - self._failed >= WARN_EVERY_S:  # once a minute, not every pass
                    self._failed = now
                    log.error("l2 budget: cannot read %s: %s", self.path, err)
            except Exception:  # the loop must outlive one bad pass
                log.exception("l2 budget pass failed")
            await asyncio.sleep(self.interval_s)
