"""No-op backend: accepts every request and steers nothing (tests, no LMCache)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ramakv_daemon.ports import Backend, BackendResult, ChunkLocations, EvictMode, OrderPosition

log = logging.getLogger("ramakv.backend")


class NoopBackend(Backend):
    """Answers ok to prefetch/evict/order and an empty map to query."""

    name = "noop"

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        """Log and accept."""
        log.debug("noop prefetch count=%d tag=%s", len(chunk_hashes), tag)
        return BackendResult(ok=True, status=200)

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        """Log and accept."""
        log.debug("noop evict count=%d mode=%s", len(chunk_hashes), mode.value)
        return BackendResult(ok=True, status=200)

    async def order(self, chunk_hashes: Sequence[str], position: OrderPosition) -> BackendResult:
        """Log and accept (there is no order to move anything in)."""
        log.debug("noop order count=%d position=%s", len(chunk_hashes), position)
        return BackendResult(ok=True, status=200)

    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        """Nothing is cached anywhere."""
        return BackendResult(ok=True, status=200), ChunkLocations()

    async def close(self) -> None:
        """Nothing to release."""
