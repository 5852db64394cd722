"""Waiting, bounded, until a restored session's chunks are back in DDR.

The daemon answers snapshot_restore before its prefetch reaches the cache (backend calls
run after the reply), so the host (the proxy, a hook) asks where the session's chunks are
(``session_map``, then ``backend_query``: the memory API's /memory/query through the
daemon) until every chunk that some tier holds is in DDR, or the deadline passes. A chunk
no tier holds cannot be prefetched and is not waited for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ramakv_sdk.client import AsyncClient
from ramakv_sdk.errors import RamAKvError
from ramakv_sdk.lifecycle.clock import Clock

log = logging.getLogger("ramakv_proxy")

DDR = "LocalCPUBackend"
QUERY_BATCH = 1000  # the daemon's max_hashes_per_event default


@dataclass(frozen=True, slots=True)
class Landing:
    """How a wait ended: ``landed`` (every held chunk in DDR), ``timeout`` or ``unknown``
    (no map, a noop backend, a failed query); ``held`` chunks some tier holds, ``in_ddr``
    of them in DDR when the wait ended, after ``waited_s``."""

    outcome: str
    held: int = 0
    in_ddr: int = 0
    waited_s: float = 0.0


class LandingWait:
    """Polls the daemon's view of the cache every ``poll_s`` until a deadline."""

    def __init__(self, client: AsyncClient, clock: Clock, poll_s: float) -> None:
        self.client = client
        self.clock = clock
        self.poll_s = poll_s
        # A noop backend (nothing is steered) never says where chunks are: once seen, the
        # wait is skipped.
        self.noop = False

    async def _where(self, hashes: list[str]) -> dict[str, list[str]] | None:
        where: dict[str, list[str]] = {}
        for i in range(0, len(hashes), QUERY_BATCH):
            env = await self.client.raw(
                {"type": "backend_query", "chunk_hashes": hashes[i : i + QUERY_BATCH]}
            )
            data = env.get("data") if env.get("ok") else None
            if isinstance(data, dict) and data.get("backend") == "noop":
                self.noop = True
            if not isinstance(data, dict) or not data.get("ok") or self.noop:
                return None
            where.update(data.get("locations") or {})
        return where

    async def suspended(self, session_id: str) -> bool:
        """Whether the daemon has the session suspended (its idle policy or the budget
        suspended it behind the proxy's back); False when it cannot tell."""
        try:
            env = await self.client.raw({"type": "list_sessions", "session_ids": [session_id]})
        except RamAKvError as err:  # DaemonUnavailable included: never hold the turn
            log.info("could not ask for session %s's state: %s", session_id, err)
            return False
        data = env.get("data") if env.get("ok") else None
        rows = data.get("sessions") if isinstance(data, dict) else None
        return any(
            isinstance(r, dict)
            and r.get("session_id") == session_id
            and r.get("state") == "suspended"
            for r in rows or ()
        )

    async def wait(self, session_id: str, deadline: float) -> Landing:
        """Wait until the session's chunks held anywhere are in DDR, or ``deadline``."""
        started = self.clock.now()
        if self.noop:
            return Landing("unknown")
        try:
            env = await self.client.raw({"type": "session_map", "session_id": session_id})
            data = env.get("data") if env.get("ok") else None
            hashes = list(dict.fromkeys(data.get("chunk_hashes") or [])) if data else []
            if not hashes:
                return Landing("unknown")
            while True:
                where = await self._where(hashes)
                if where is None:
                    return Landing("unknown", waited_s=self.clock.now() - started)
                held = [h for h in hashes if where.get(h)]
                in_ddr = sum(1 for h in held if DDR in where[h])
                now = self.clock.now()
                if in_ddr == len(held):
                    return Landing("landed", len(held), in_ddr, now - started)
                if now >= deadline:
                    return Landing("timeout", len(held), in_ddr, now - started)
                await self.clock.sleep(min(self.poll_s, deadline - now))
        except RamAKvError as err:  # DaemonUnavailable included: never hold the turn
            log.info("restore wait for session %s gave up: %s", session_id, err)
            return Landing("unknown", waited_s=self.clock.now() - started)
