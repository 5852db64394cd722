"""LISTEN for takeovers of this node's sessions on a dedicated connection, reconnecting
with backoff when PostgreSQL goes away; the ownership check after each reconnect and
periodically."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ramakv_daemon.adapters.postgres.sql import RELEASE_CHANNEL

log = logging.getLogger("ramakv.store")

BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 5.0


class ReleaseListener:
    """Calls ``on_release(session_id, new_owner)`` for every takeover from ``node_id``.

    A notification sent while the connection was down is lost, so after each reconnect
    ``reconcile`` runs (the daemon asks the database which of its sessions another node
    took or closed), and every ``check_s`` seconds while connected as well: the safety net
    for a release that failed, or a notification that never came. ``on_back`` is told of
    each reconnect first. ``connected`` and ``reconnects`` feed /metrics and the readiness
    check.
    """

    def __init__(
        self,
        url: str,
        node_id: str,
        on_release: Callable[[str, str], None],
        reconcile: Callable[[], Awaitable[None]],
        check_s: float = 30.0,
        on_back: Callable[[], None] | None = None,
    ) -> None:
        self.url = url
        self.node_id = node_id
        self.on_release = on_release
        self.reconcile = reconcile
        self.check_s = check_s
        self.on_back = on_back
        self.connected = False
        self.reconnects = 0
        self.received = 0
        self._con: Any = None
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self._stopping = False

    async def start(self) -> None:
        """Connect once now (the store just opened, so this normally works), then keep the
        connection up in the background."""
        try:
            await self._connect()
        except Exception as err:  # the background loop retries
            log.warning("cannot LISTEN for takeovers yet: %s", err)
            self._lost.set()
        self._task = asyncio.get_running_loop().create_task(
            self._keep_connected(), name="pg-release-listener"
        )

    async def _connect(self) -> None:
        import asyncpg

        # Named apart from the pool's connections: an operator (or a test) can find it.
        name = f"ram-a-kv {self.node_id} listen"[:63]
        con = await asyncpg.connect(self.url, timeout=5, server_settings={"application_name": name})
        con.add_termination_listener(self._terminated)
        await con.add_listener(RELEASE_CHANNEL, self._notified)
        self._con = con
        self.connected = True
        self._lost.clear()

    def _terminated(self, _con: Any) -> None:
        self.connected = False
        self._lost.set()

    def _notified(self, _con: Any, _pid: int, _channel: str, payload: object) -> None:
        try:
            if not isinstance(payload, str):  # asyncpg sends text; its stubs say object
                raise TypeError(f"payload is a {type(payload).__name__}, not text")
            msg = orjson.loads(payload)
            session_id, old, new = str(msg["session_id"]), str(msg["from"]), str(msg["to"])
        except (ValueError, KeyError, TypeError) as err:
            log.warning("ignoring malformed takeover notification %r: %s", payload, err)
            return
        if old == self.node_id and new != self.node_id:
            self.received += 1
            self.on_release(session_id, new)

    async def _keep_connected(self) -> None:
        delay = BACKOFF_FIRST_S
        while not self._stopping:
            try:
                await asyncio.wait_for(self._lost.wait(), self.check_s)
            except TimeoutError:
                await self._check("periodic check")
                continue
            if self._stopping:
                return
            self.connected = False
            with contextlib.suppress(Exception):
                if self._con is not None:
                    self._con.terminate()
            self._con = None
            try:
                await self._connect()
            except Exception as err:  # keep trying, slower each time
                log.warning(
                    "PostgreSQL LISTEN reconnect failed (next try in %.1fs): %s", delay, err
                )
                await asyncio.sleep(delay)  # backoff between attempts, not synchronisation
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            delay = BACKOFF_FIRST_S
            self.reconnects += 1
            log.info("PostgreSQL LISTEN connection back (reconnect %d)", self.reconnects)
            if self.on_back is not None:
                self.on_back()
            await self._check("reconnect")

    async def _check(self, why: str) -> None:
        try:
            await self.reconcile()
        except Exception as err:  # the next check tries again
            log.warning("ownership check (%s) failed: %s", why, err)

    async def stop(self) -> None:
        self._stopping = True
        self._lost.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._con is not None:
            con, self._con = self._con, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(con.close(), timeout=2)
        self.connected = False
