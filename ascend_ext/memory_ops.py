"""Prefetch / evict / order / query on one LMCache 0.5.6 engine's StorageManager (no HTTP)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ascend_ext import order_hint
from ascend_ext.deferred_evict import DeferredEvictions
from ascend_ext.request_error import RequestError

log = logging.getLogger("ascend_ext.memory")

CPU = "LocalCPUBackend"
DISK = "LocalDiskBackend"
# Signed hex as LMCache-Ascend prints chunk hashes ("-6ed9a448787a198f"); bounded length so a
# hostile body cannot make int() chew on megabytes.
_HEX = re.compile(r"-?[0-9a-fA-F]{1,64}")
# How long an evict waits for a chunk's in-flight disk write before removing anyway.
PUT_WAIT_S = 5.0
_STATUS_KEEP = 256


def parse_hashes(body: dict) -> list[str]:
    """Validate ``chunk_hashes``: a list of signed-hex strings, returned verbatim."""
    hashes = body.get("chunk_hashes")
    if hashes is None:
        raise RequestError("missing required field 'chunk_hashes'")
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        raise RequestError("field 'chunk_hashes' must be a list of strings")
    for h in hashes:
        if not _HEX.fullmatch(h):
            raise RequestError(f"field 'chunk_hashes' has a non-hex entry {h[:80]!r}")
    return hashes


def parse_locations(body: dict) -> list[str] | None:
    """Validate optional ``locations``: None (every tier) or a list of backend names."""
    locations = body.get("locations")
    if locations is None:
        return None
    if not isinstance(locations, list) or not all(isinstance(x, str) for x in locations):
        raise RequestError("field 'locations' must be a list of strings")
    return locations


def parse_lookup_id(body: dict) -> str:
    """Validate optional ``lookup_id`` (a string); a generated one when absent."""
    lookup_id = body.get("lookup_id")
    if lookup_id is None:
        return f"prefetch-{time.time_ns()}"
    if not isinstance(lookup_id, str):
        raise RequestError("field 'lookup_id' must be a string")
    return lookup_id


def parse_cancel_id(body: dict) -> str:
    """Validate a cancel's ``lookup_id``: required, a non-empty string."""
    lookup_id = body.get("lookup_id")
    if lookup_id is None:
        raise RequestError("missing required field 'lookup_id'")
    if not isinstance(lookup_id, str) or not lookup_id:
        raise RequestError("field 'lookup_id' must be a non-empty string")
    return lookup_id


@dataclass(slots=True, eq=False)
class _Prefetch:
    """One prefetch on its way through the worker: its public status and its cancel flag.

    ``at`` is the index of the chunk the worker is loading (-1: not started); both it and
    ``cancelled`` change under the status lock, so a cancel knows exactly how many chunks
    the worker will still skip.
    """

    keys: list[tuple[str, Any]]
    state: dict
    at: int = -1
    cancelled: bool = False


class MemoryOps:
    """The memory API's operations on one engine's StorageManager.

    Mutating work (prefetch loads, evictions) runs on one worker thread in arrival order, so
    an evict sent after a prefetch is applied after it, and a disk file is never removed under
    a load that is reading it.
    """

    def __init__(self, engine: Any) -> None:
        """Bind to an engine that has been post_init'ed (it owns a storage_manager)."""
        if engine.storage_manager is None:
            raise RuntimeError("engine has no storage manager (post_init not called?)")
        self.engine = engine
        self.sm = engine.storage_manager
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ramakv-memory")
        self._status: OrderedDict[str, dict] = OrderedDict()
        self._status_lock = threading.Lock()
        # lookup_id -> its prefetches queued or running (a cancel stops every one of them).
        self._active: dict[str, list[_Prefetch]] = {}
        self.deferred = DeferredEvictions()
        self._timers: set[threading.Timer] = set()
        self._closed = False

    # -- keys -------------------------------------------------------------------------------
    def key_for(self, hex_hash: str) -> Any:
        """Hex hash -> CacheEngineKey with this engine's model, world size, worker, dtype."""
        chunk_hash = int(hex_hash, 16)
        db = getattr(self.engine, "token_database", None)
        if db is not None and hasattr(db, "_make_key_by_hash"):
            # The token database knows MLA's world-size collapse; use its own key maker.
            return db._make_key_by_hash(chunk_hash)
        from lmcache.utils import CacheEngineKey

        md = self.engine.metadata
        return CacheEngineKey(md.model_name, md.world_size, md.worker_id, chunk_hash, md.kv_dtype)

    def backend_names(self) -> list[str]:
        """Names of this engine's storage tiers, in lookup order."""
        return list(self.sm.storage_backends)

    # -- query ------------------------------------------------------------------------------
    def query(self, hashes: Sequence[str]) -> dict[str, list[str]]:
        """hash -> tiers holding it now; asks every backend (prefix lookups stop at a miss)."""
        backends = list(self.sm.storage_backends.items())
        out: dict[str, list[str]] = {}
        for h in hashes:
            key = self.key_for(h)
            out[h] = [name for name, b in backends if b.contains(key, pin=False)]
        return out

    # -- evict ------------------------------------------------------------------------------
    def evict(self, hashes: Sequence[str], locations: list[str] | None) -> int:
        """Remove chunks from the given tiers (None = all); returns copies removed."""
        self._check_locations(locations)
        keys = [self.key_for(h) for h in hashes]
        return self._worker.submit(self._evict_now, keys, locations).result()

    def evict_with(
        self,
        hashes: Sequence[str],
        locations: list[str] | None,
        generation: int | None,
        defer_s: float,
        not_after: int | None = None,
    ) -> dict:
        """An evict from the daemon: chunks whose newer keep was seen are refused as
        stale, those past ``not_after`` (wall ns) as expired, the rest removed now or, with
        ``defer_s``, after it unless kept meanwhile (and never after ``not_after``)."""
        self._check_locations(locations)
        added = self.deferred.add(hashes, locations, generation, defer_s, not_after)
        n = 0
        if added.now:
            n = self._worker.submit(self._evict_claimed, added.now, locations).result()
        if added.deferred:
            self._schedule(defer_s)
        return {
            "status": "success",
            "num_evicted": n,
            "deferred": added.deferred,
            "stale": added.stale,
            "expired": added.expired,
            "expires": True,  # this memory API honours not_after_ns (the daemon relies on it)
        }

    def keep(self, hashes: Sequence[str], generation: int) -> dict:
        """The daemon saw these chunks referenced again: cancel their older deletes (a
        removal under way is waited for, so "late" means the chunk is gone already), and
        queue a move to the warm end of every tier (not waited for: a keep answers fast)."""
        cancelled, late = self.deferred.keep(hashes, generation)
        keys = self._unique_keys(hashes)
        try:
            self._worker.submit(self._order_logged, keys, "warm")
        except RuntimeError:  # worker shut down (engine closing): no order left to keep
            pass
        return {"status": "success", "cancelled": cancelled, "late": late, "expires": True}

    # -- order ------------------------------------------------------------------------------
    def order(
        self, hashes: Sequence[str], position: order_hint.Position, locations: list[str] | None
    ) -> dict:
        """Move chunks to the cold (evicted first) or warm (evicted last) end of the given
        tiers' eviction order (None = every tier); nothing is removed. On the worker thread,
        in arrival order with prefetches and evicts."""
        self._check_locations(locations)
        keys = self._unique_keys(hashes)
        moved, found = self._worker.submit(self._order_now, keys, position, locations).result()
        return {"status": "success", "moved": moved, "missing": len(keys) - len(found)}

    def _unique_keys(self, hashes: Sequence[str]) -> list:
        """Keys of the hashes, first occurrence kept (a repeated hash moves once)."""
        return list(dict.fromkeys(self.key_for(h) for h in hashes))

    def _order_now(
        self, keys: list, position: order_hint.Position, locations: list[str] | None
    ) -> tuple[int, set[int]]:
        """Wait out in-flight disk writes (a write landing after the hint would put the chunk
        back at the warm end), then reorder each tier asked (worker thread)."""
        self._wait_pending_puts(keys)
        moved, found = 0, set()
        for name, backend in self.sm.storage_backends.items():
            if locations is None or name in locations:
                n, held = order_hint.place(backend, keys, position)
                moved += n
                found |= held
        return moved, found

    def _order_logged(self, keys: list, position: order_hint.Position) -> None:
        """A queued order nobody waits for (a keep's warm move): failures are logged."""
        try:
            self._order_now(keys, position, None)
        except Exception:  # keep the worker alive
            log.exception("order %s of %d chunks failed", position, len(keys))

    def _schedule(self, delay: float) -> None:
        if self._closed:
            return
        timer = threading.Timer(delay + 0.001, self._fire)
        timer.daemon = True
        self._timers.add(timer)
        timer.start()

    def _fire(self) -> None:
        self._timers = {t for t in self._timers if t.is_alive()}
        if self._closed:
            return
        try:
            self._worker.submit(self._evict_due)
        except RuntimeError:  # worker shut down meanwhile
            pass

    def _evict_due(self) -> None:
        """Deferred deletes whose time has come and that no keep cancelled (worker thread)."""
        for locations, hashes in self.deferred.due():
            try:
                removed = self._evict_claimed(hashes, locations)
                log.info("deferred evict of %d chunks removed %d copies", len(hashes), removed)
            except Exception:  # keep the worker alive
                log.exception("deferred evict failed")

    def _evict_claimed(self, hashes: list[str], locations: list[str] | None) -> int:
        """Wait out in-flight disk writes, then claim (the last check: a keep or the
        deadline may have come meanwhile) and remove at once (worker thread)."""
        self._wait_pending_puts([self.key_for(h) for h in hashes])
        claimed = self.deferred.claim(hashes)
        try:
            if not claimed:
                return 0
            return int(self.sm.batched_remove([self.key_for(h) for h in claimed], locations))
        finally:
            self.deferred.finish(claimed)

    def _check_locations(self, locations: list[str] | None) -> None:
        if locations is not None:
            unknown = [x for x in locations if x not in self.sm.storage_backends]
            if unknown:
                raise RequestError(
                    f"field 'locations' names unknown backend(s) {unknown}; "
                    f"this engine has {self.backend_names()}"
                )

    def _evict_now(self, keys: list, locations: list[str] | None) -> int:
        """Wait out in-flight disk writes, then batched_remove (runs on the worker thread)."""
        self._wait_pending_puts(keys)
        return int(self.sm.batched_remove(keys, locations))

    def _wait_pending_puts(self, keys: list) -> None:
        """An evict racing a chunk's async disk write removes nothing and the write then puts
        the chunk back; so wait (bounded) for each key's pending put to land first."""
        deadline = time.monotonic() + PUT_WAIT_S
        for backend in self.sm.storage_backends.values():
            pending = getattr(backend, "exists_in_put_tasks", None)
            if pending is None:
                continue
            for key in keys:
                while pending(key) and time.monotonic() < deadline:
                    time.sleep(0.002)

    # -- prefetch ---------------------------------------------------------------------------
    def prefetch(self, hashes: Sequence[str], lookup_id: str) -> Future:
        """Start loading chunks into DDR (from disk, or a tier beyond such as LMCache's shared
        remote one) in the background; returns at once."""
        keys = [(h, self.key_for(h)) for h in hashes]
        state = {
            "lookup_id": lookup_id,
            "state": "queued",
            "num_chunks": len(keys),
            "loaded": 0,
            "already_ddr": 0,
            "missing": 0,
            "ddr_full": 0,
        }
        job = _Prefetch(keys, state)
        with self._status_lock:
            self._status[lookup_id] = state
            while len(self._status) > _STATUS_KEEP:
                self._status.popitem(last=False)
            self._active.setdefault(lookup_id, []).append(job)
        try:
            return self._worker.submit(self._prefetch_now, job)
        except RuntimeError:  # the worker is shut down (engine closing): never runs
            self._finished(job)
            raise

    def prefetch_status(self, lookup_id: str) -> dict | None:
        """The progress of a recent prefetch, or None when unknown."""
        with self._status_lock:
            state = self._status.get(lookup_id)
            return dict(state) if state else None

    def cancel_prefetch(self, lookup_id: str) -> dict:
        """Stop every queued or running prefetch named ``lookup_id`` before its next chunk
        (the chunk being loaded finishes; what was loaded stays in DDR). Answers how many
        prefetches were stopped and how many chunks they will not load; an unknown or
        finished one stops nothing (0, 0): a cancel is safe to repeat."""
        cancelled = skipped = 0
        with self._status_lock:
            for job in self._active.get(lookup_id, []):
                left = len(job.keys) - (job.at + 1)
                if job.cancelled or left <= 0:
                    continue  # stopped already, or loading its last chunk
                job.cancelled = True
                job.state["skipped"] = left
                if job.at < 0:  # still queued: it never starts
                    job.state["state"] = "cancelled"
                cancelled += 1
                skipped += left
        if cancelled:
            log.info("prefetch %s cancelled: %d chunks skipped", lookup_id, skipped)
        return {
            "status": "success",
            "lookup_id": lookup_id,
            "cancelled": cancelled,
            "skipped": skipped,
        }

    def _next_chunk(self, job: _Prefetch, index: int) -> bool:
        """Claim chunk ``index`` for loading; False when the prefetch was cancelled."""
        with self._status_lock:
            if job.cancelled:
                return False
            job.at = index
            return True

    def _prefetch_now(self, job: _Prefetch) -> None:
        """Load each chunk on disk through the StorageManager, then drop our reference;
        a cancel stops it between chunks."""
        state = job.state
        started = time.perf_counter()
        try:
            with self._status_lock:
                if not job.cancelled:
                    state["state"] = "running"
            if not job.cancelled:
                self._load_chunks(job)
                state["state"] = "cancelled" if job.cancelled else "done"
        except Exception as exc:  # keep the worker alive; report through the status
            log.exception("prefetch %s failed", state["lookup_id"])
            state["state"] = "failed"
            state["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            self._finished(job)
        state["ms"] = round((time.perf_counter() - started) * 1000, 2)
        log.info("prefetch %s %s", state["lookup_id"], state)

    def _finished(self, job: _Prefetch) -> None:
        """A prefetch left the worker: a cancel no longer finds it."""
        lookup_id = job.state["lookup_id"]
        with self._status_lock:
            jobs = self._active.get(lookup_id, [])
            if job in jobs:
                jobs.remove(job)
            if not jobs:
                self._active.pop(lookup_id, None)

    def _load_chunks(self, job: _Prefetch) -> None:
        """The worker's loop over one prefetch's chunks (stops at a cancel)."""
        state = job.state
        cpu = self.sm.storage_backends.get(CPU)
        disk = self.sm.storage_backends.get(DISK)
        for i, (_h, key) in enumerate(job.keys):
            if not self._next_chunk(job, i):
                return
            if cpu is not None and cpu.contains(key, pin=False):
                # Already in DDR: mark it recently used, so the LRU does not evict a
                # chunk that is about to be reused (the cache benchmark's largest gain);
                # its disk copy too (a chunk loaded below is warmed on both by get()).
                _touch(cpu, key)
                if disk is not None:
                    order_hint.place(disk, [key], "warm")
                state["already_ddr"] += 1
                continue
            if disk is None or not disk.contains(key, pin=False):
                # On no local tier: a tier beyond (LMCache's shared remote one, written
                # by another node's engine) may have it.
                state["loaded" if self._load_from_beyond(key) else "missing"] += 1
                continue
            if cpu is not None and not self._ddr_has_room(cpu, disk, key):
                # The disk load allocates with busy_loop=True and would spin until DDR
                # frees up; skip instead so a full DDR cannot wedge the worker thread.
                state["ddr_full"] += 1
                continue
            obj = self.sm.get(key, location=DISK)
            if obj is None:
                state["missing"] += 1
                continue
            # 0.5.6's get() already wrote obj into LocalCPUBackend's hot cache (its own ref);
            # ours is the caller's reference and must go, or the buffer leaks.
            obj.ref_count_down()
            state["loaded"] += 1

    def _load_from_beyond(self, key: Any) -> bool:
        """Load ``key`` into DDR from a tier other than DDR and disk; True when one had it."""
        for name, backend in self.sm.storage_backends.items():
            if name in (CPU, DISK) or not backend.contains(key, pin=False):
                continue
            obj = self.sm.get(key, location=name)  # 0.5.6 writes a remote hit into DDR
            if obj is not None:
                obj.ref_count_down()  # the caller's reference, as for a disk load
                return True
        return False

    @staticmethod
    def _ddr_has_room(cpu: Any, disk: Any, key: Any) -> bool:
        """Probe a non-blocking DDR allocation of the chunk's shape (evicting LRU if needed)."""
        with disk.disk_lock:
            meta = disk.dict.get(key)
            if meta is None:
                return True  # vanished: get() will answer None
            shape, dtype, fmt = meta.shape, meta.dtype, meta.fmt
        probe = cpu.allocate(shape, dtype, fmt, eviction=True, busy_loop=False)
        if probe is None:
            return False
        probe.ref_count_down()  # free the probe; the real load allocates again
        return True

    def run_serial(self, fn: Any, *args: Any) -> Any:
        """Run fn on the worker thread, in order with prefetches and evictions; wait for it."""
        return self._worker.submit(fn, *args).result()

    def close(self) -> None:
        """Finish queued work and stop the worker thread (pending deferred deletes are
        dropped: the chunks stay, the safe side)."""
        self._closed = True
        for timer in list(self._timers):
            timer.cancel()
        self._worker.shutdown(wait=True)


def _touch(cpu: Any, key: Any) -> None:
    """Move ``key`` to the most-recently-used end of LocalCPUBackend's eviction order."""
    lock, policy, hot = (getattr(cpu, n, None) for n in ("cpu_lock", "cache_policy", "hot_cache"))
    if lock is None or policy is None or hot is None:
        return
    with lock:
        if key in hot:
            policy.update_on_hit(key, hot)
