"""The trace subscription: the daemon's websocket messages, resumed across drops."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from ramakv_sdk._closing import AsyncClosing
from ramakv_sdk.errors import RamAKvError, TraceProtocolMismatch, TraceUnauthorized

TRACE_PROTOCOL = 2  # the version this SDK speaks (docs/trace.md)
# The daemon never sends a message over 1 MiB (protocol 2); accepting 4 MiB leaves room.
MAX_MESSAGE_BYTES = 4 << 20
SLOW_CLOSE_CODE = 4008  # the daemon's "you fell behind; reconnect with ?since="
PROTOCOL_CLOSE_CODE = 4010  # the daemon's "wrong protocol version"
TOO_LARGE_CODE = 1009  # aiohttp: a message over max_msg_size
_FATAL_HANDSHAKE = {400, 404}
_UNAUTHORIZED = {401, 403}


def _decode(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def classify(code: int | None) -> str:
    """What a close code means for a follower: one word for the ``error`` of a marker."""
    if code == SLOW_CLOSE_CODE:
        return "slow"
    if code == TOO_LARGE_CODE:
        return "too_large"
    if code == 1001:
        return "shutdown"
    return "dropped"


class TraceSubscription(AsyncClosing):
    """Async iterator of trace messages (dicts) that reconnects with ``since=<last seq>``.

    Besides the daemon's ``snapshot`` and ``event`` messages it yields two markers:

    * ``{"kind": "disconnected", "code": int | None, "error": str, "reason": str,
      "last_seq": n}`` once per outage (also when the first connection fails), then it
      retries with exponential backoff and jitter; ``error`` is one of ``unreachable``,
      ``too_large`` (a message over ``max_msg_size``), ``slow`` (4008), ``shutdown``,
      ``http`` (another handshake status) or ``dropped``;
    * ``{"kind": "reconnected", "since": n | None, "attempts": k}`` when it is back.

    It resumes with ``?since=<last seq>&epoch=<daemon run>``: the same daemon run replays
    the events after ``since`` (or sends a fresh ``snapshot`` when they fell out of its
    ring); a restarted daemon, whose sequence numbers start again from 0, sees another
    epoch and sends a fresh ``snapshot``. A daemon that sends no epoch is only resumed after
    a slow-subscriber close (4008); after other drops it is asked for a snapshot (``since``
    None in the marker). Either way a ``snapshot`` means: replace all state.

    The backoff doubles from 0.1 s up to ``max_backoff`` (each delay drawn between half
    and all of it) and is reset only once a message has arrived: a daemon that accepts the
    handshake and closes at once is not retried 20 times a second.

    Iteration ends only by ``aclose()`` (or ``break``); a refused handshake raises instead
    of retrying forever: :class:`TraceUnauthorized` (401/403),
    :class:`TraceProtocolMismatch` (the daemon speaks another protocol version) or
    :class:`RamAKvError` (400/404: wrong path or query).
    """

    def __init__(
        self,
        session_factory: Callable[[], aiohttp.ClientSession],
        base_url: str,
        since: int | None = None,
        session: str | None = None,
        max_backoff: float = 5.0,
        heartbeat: float = 15.0,
        history: int = 0,
        max_msg_size: int = MAX_MESSAGE_BYTES,
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
        self.history = history
        self.max_msg_size = max_msg_size
        self._attempt = 0  # failed tries since data last flowed

    def _params(self) -> dict[str, str]:
        params: dict[str, str] = {"protocol": str(TRACE_PROTOCOL)}
        if self.history and self.last_seq is None:
            params["history"] = str(self.history)
        if self.last_seq is not None:
            params["since"] = str(self.last_seq)
            if self.epoch is not None:
                params["epoch"] = self.epoch
        if self.session is not None:
            params["session"] = self.session
        return params

    def backoff(self) -> float:
        """The next delay: doubling per failed try, capped, with jitter."""
        base = min(self.max_backoff, 0.1 * 2 ** min(self._attempt, 20))
        return base * random.uniform(0.5, 1.0)

    async def _connect(self) -> dict[str, Any] | None:
        """Connect (retrying); a marker to yield first, or None when nothing needs saying."""
        while not self._closed:
            if self._attempt:
                await asyncio.sleep(self.backoff())
            try:
                ws = await self._session_factory().ws_connect(
                    self.url,
                    params=self._params(),
                    heartbeat=self.heartbeat,
                    timeout=aiohttp.ClientWSTimeout(ws_close=2.0),
                    max_msg_size=self.max_msg_size,
                )
            except aiohttp.WSServerHandshakeError as err:
                if err.status in _UNAUTHORIZED:
                    raise TraceUnauthorized(
                        f"trace refused by {self.url}: HTTP {err.status} (missing or wrong "
                        "auth token: pass --token or set auth_token in the SDK config)",
                        status=err.status,
                    ) from err
                if err.status in _FATAL_HANDSHAKE:
                    raise RamAKvError(
                        f"trace refused by {self.url}: HTTP {err.status} {err.message}",
                        status=err.status,
                    ) from err
                error, reason = "http", f"HTTP {err.status} {err.message}"
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                error = "unreachable"
                reason = f"daemon unreachable at {self.url}: {err or type(err).__name__}"
            else:
                self._ws = ws
                self.connected = True
                if self._outage_reported:
                    self._outage_reported = False
                    self.reconnects += 1
                    return {
                        "kind": "reconnected",
                        "since": self.last_seq,
                        "attempts": self._attempt + 1,
                    }
                self._ever_connected = True
                return None
            self._attempt += 1
            if not self._outage_reported:
                self._outage_reported = True
                return {
                    "kind": "disconnected",
                    "code": None,
                    "error": error,
                    "reason": reason,
                    "last_seq": self.last_seq,
                }
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
                    data = _decode(msg.data)
                except ValueError:
                    continue
                self._attempt = 0  # data flows: the next outage starts from a short delay
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
            if isinstance(msg.data, aiohttp.WebSocketError):
                code = msg.data.code
        await ws.close()
        self._ws = None
        self.connected = False
        if self._closed:
            raise StopAsyncIteration
        if code == PROTOCOL_CLOSE_CODE:
            raise TraceProtocolMismatch(
                f"trace protocol mismatch with {self.url}: {reason} (this SDK speaks "
                f"protocol {TRACE_PROTOCOL})",
                status=None,
            )
        error = classify(code)
        if error == "too_large":
            reason = (
                f"a trace message was larger than this client's limit of "
                f"{self.max_msg_size} bytes ({reason})"
            )
        self._attempt += 1
        self._outage_reported = True
        marker = {
            "kind": "disconnected",
            "code": code,
            "error": error,
            "reason": reason,
            "last_seq": self.last_seq,
        }
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
