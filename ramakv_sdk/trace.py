"""The trace subscription: the daemon's websocket messages, resumed across drops."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp

from ramakv_sdk._closing import AsyncClosing
from ramakv_sdk.errors import RamAKvError

SLOW_CLOSE_CODE = 4008  # the daemon's "you fell behind; reconnect with ?since="
_FATAL_HANDSHAKE = {400, 401, 403, 404}


class TraceSubscription(AsyncClosing):
    """Async iterator of trace messages (dicts) that reconnects with ``since=<last seq>``.

    Besides the daemon's ``snapshot`` and ``event`` messages it yields two markers:

    * ``{"kind": "disconnected", "code": int | None, "reason": str, "last_seq": n}`` once per
      outage (also when the first connection fails), then it retries with backoff;
    * ``{"kind": "reconnected", "since": n | None, "attempts": k}`` when it is back.

    It resumes with ``?since=<last seq>&epoch=<daemon run>``: the same daemon run replays
    the events after ``since`` (or sends a fresh ``snapshot`` when they fell out of its
    ring); a restarted daemon, whose sequence numbers start again from 0, sees another
    epoch and sends a fresh ``snapshot``. A daemon that sends no epoch is only resumed after
    a slow-subscriber close (4008); after other drops it is asked for a snapshot (``since``
    None in the marker). Either way a ``snapshot`` means: replace all state.

    Iteration ends only by ``aclose()`` (or ``break``); a refused handshake (bad token,
    wrong path) raises :class:`RamAKvError` instead of retrying forever.
    """

    def __init__(
        self,
        session_factory: Callable[[], aiohttp.ClientSession],
        base_url: str,
        since: int | None = None,
        session: str | None = None,
        max_backoff: float = 5.0,
        heartbeat: float = 15.0,
    ) -> None:
        self._session_factory = session_factory
        self.url = base_url.rstrip("/") + "/trace"
        self.session = session
        self.last_seq = since
        self.epoch: str | None = None
        self.max_backoff = max_backoff
        self.heartbeat = heartbeat
        self.connected = False
        self.reconnects = 0
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._closed = False
        self._outage_reported = False
        self._ever_connected = False

    def _params(self) -> dict[str, str]:
        params: dict[str, str] = {}
        if self.last_seq is not None:
            params["since"] = str(self.last_seq)
            if self.epoch is not None:
                params["epoch"] = self.epoch
        if self.session is not None:
            params["session"] = self.session
        return params

    async def _connect(self) -> dict[str, Any] | None:
        """Connect (retrying); a marker to yield first, or None when nothing needs saying."""
        attempt = 0
        while not self._closed:
            try:
                ws = await self._session_factory().ws_connect(
                    self.url, params=self._params(), heartbeat=self.heartbeat,
                    timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
                )
            except aiohttp.WSServerHandshakeError as err:
                if err.status in _FATAL_HANDSHAKE:
                    raise RamAKvError(
                        f"trace refused by {self.url}: HTTP {err.status} {err.message}",
                        status=err.status,
                    ) from err
                reason = f"HTTP {err.status} {err.message}"
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                reason = str(err) or type(err).__name__
            else:
                self._ws = ws
                self.connected = True
                if self._outage_reported:
                    self._outage_reported = False
                    self.reconnects += 1
                    return {"kind": "reconnected", "since": self.last_seq, "attempts": attempt + 1}
                self._ever_connected = True
                return None
            if not self._outage_reported:
                self._outage_reported = True
                return {"kind": "disconnected", "code": None, "reason": reason,
                        "last_seq": self.last_seq}
            await asyncio.sleep(min(self.max_backoff, 0.1 * 2**attempt))
            attempt += 1
        return None

    def __aiter__(self) -> TraceSubscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._closed:
            if self._ws is None:
                marker = await self._connect()
                if marker is not None:
                    return marker
                continue
            msg = await self._ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT:
                try:
                    data = json.loads(msg.data)
                except ValueError:
                    continue
                if isinstance(data, dict):
                    if isinstance(data.get("seq"), int):
                        self.last_seq = data["seq"]
                    if isinstance(data.get("epoch"), str):
                        self.epoch = data["epoch"]
                    return data
                continue
            if msg.type in (aiohttp.WSMsgType.PING, aiohttp.WSMsgType.PONG):
                continue
            return await self._dropped(msg)
        raise StopAsyncIteration

    async def _dropped(self, msg: aiohttp.WSMessage) -> dict[str, Any]:
        ws = self._ws
        assert ws is not None
        code = ws.close_code
        reason = msg.extra if isinstance(msg.extra, str) and msg.extra else msg.type.name.lower()
        if msg.type == aiohttp.WSMsgType.ERROR:
            reason = str(msg.data)
        await ws.close()
        self._ws = None
        self.connected = False
        if self._closed:
            raise StopAsyncIteration
        self._outage_reported = True
        marker = {"kind": "disconnected", "code": code, "reason": reason,
                  "last_seq": self.last_seq}
        if code != SLOW_CLOSE_CODE and self.epoch is None:
            self.last_seq = None  # maybe a restart we could not detect: ask for a snapshot
        return marker

    async def aclose(self) -> None:
        """Stop: close the websocket; iteration then ends."""
        self._closed = True
        if self._ws is not None:
            await self._ws.close()
            self._ws = None
        self.connected = False
