"""Fork holds past fork_hold_ttl_s are released as their fork_end would: a subagent that
never sent its session_fork_end must not hold its chunks for ever."""

from __future__ import annotations

import asyncio
import logging

from ramakv_daemon.bus.commands import ExpireForks
from ramakv_daemon.bus.messagebus import MessageBus
from ramakv_daemon.routing.namespaces import Namespaces
from ramakv_daemon.sweeps import loop

log = logging.getLogger("ramakv")


class ForkExpiry:
    """Expires old fork holds at start-up and then every ttl/10 (1 s to 60 s): the timer;
    the bus's ExpireForks handler releases them (bus/handlers.py)."""

    def __init__(self, ttl_s: float, namespaces: Namespaces, bus: MessageBus) -> None:
        self.ttl_s = ttl_s
        self.namespaces = namespaces
        self.bus = bus
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Expire the holds that expired while the daemon was down, then keep looking."""
        if self.ttl_s <= 0:
            return
        await self.expire_forks()
        self._task = asyncio.get_running_loop().create_task(self._forever(), name="fork-expiry")

    async def close(self) -> None:
        await loop.stop(self._task)

    async def expire_forks(self) -> int:
        """Release every fork hold older than fork_hold_ttl_s, as its fork_end would.

        Each expiry is logged at WARNING (a subagent that never sent its fork_end) and
        published on the trace as a ``fork_expire`` event. Returns how many expired.
        """
        total = 0
        for ns in list(self.namespaces):
            if len(ns.manager.forks):
                total += await self.bus.handle(ExpireForks(ns.key, self.ttl_s))
        return total

    async def _forever(self) -> None:
        interval = min(60.0, max(1.0, self.ttl_s / 10))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.expire_forks()
            except Exception:  # the loop must outlive one bad pass
                log.exception("fork expiry pass failed")
