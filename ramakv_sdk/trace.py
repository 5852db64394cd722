"""The trace subscription: the daemon's websocket messages, resumed across drops.

The networking is here; what to do after a drop (backoff, ``?since=``, what each close
code means) is ramakv_protocol.resume's, shared with every other Python follower.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from ramakv_protocol.dispatch import as_message, parse
from ramakv_protocol.records import DisconnectedMarker, DropError, ReconnectedMarker
from ramakv_protocol.resume import Backoff, Resume, close_meaning
from ramakv_protocol.wire import CLIENT_MAX_MESSAGE_BYTES, PROTOCOL
from ramakv_sdk._closing import AsyncClosing
from ramakv_sdk.errors import RamAKvError, TraceProtocolMismatch, TraceUnauthorized

TRACE_PROTOCOL = PROTOCOL  # the version this SDK speaks (docs/trace.md)
# The daemon never sends a message over 1 MiB (protocol 2); accepting 4 MiB leaves room.
MAX_MESSAGE_BYTES = CLIENT_MAX_MESSAGE_BYTES
_FATAL_HANDSHAKE = {400, 404}
_UNAUTHORIZED = {401, 403}


def _decode(text: str) -> object:
    """orjson first; what it refuses (integers over 64 bits) the standard decoder reads."""
    value = parse(text, orjson.loads)
    return parse(text, json.loads) if value is None else value


def classify(code: int | None) -> DropError:
    """What a close code means for a follower: one word for the ``error`` of a marker."""
    return close_meaning(code).error


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
    handshake and closes at once is not retried 20 times a second. ``history=N`` goes with
    every connect: the daemon sends those recent records only before a fresh snapshot, so
    a log starts filled after a restart too. (The policy: ramakv_protocol.resume.)

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
        self.resume = Resume(since, session, history, Backoff(cap=max_backoff))
        self.heartbeat = heartbeat
        self.connected = False
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._closed = False
        self.max_msg_size = max_msg_size

    # The place and the outage counts are the resume policy's; read here for callers.
    @property
    def last_seq(self) -> int | None:
        return self.resume.last_seq

    @property
    def epoch(self) -> str | None:
        return self.resume.epoch

    @property
    def session(self) -> str | None:
        return self.resume.session

    @property
    def history(self) -> int:
        return self.resume.history

    @property
    def max_backoff(self) -> float:
        return self.resume.backoff.cap

    @property
    def reconnects(self) -> int:
        return self.resume.reconnects

    @property
    def _attempt(self) -> int:
        """Failed tries since data last flowed."""
        return self.resume.backoff.failures

    def _params(self) -> dict[str, str]:
        return self.resume.query()

    def backoff(self) -> float:
        """The next delay: doubling per failed try, capped, with jitter."""
        return self.resume.delay()

    async def _connect(self) -> DisconnectedMarker | ReconnectedMarker | None:
        """Connect (retrying); a marker to yield first, or None when nothing needs saying."""
        while not self._closed:
            delay = self.resume.delay()
            if delay:
                await asyncio.sleep(delay)
            error: DropError
            try:
                ws = await self._session_factory().ws_connect(
                    self.url,
                    params=self.resume.query(),
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
                return self.resume.connected()
            marker = self.resume.connect_failed(error, reason)
            if marker is not None:
                return marker
        return None

    def __aiter__(self) -> TraceSubscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._closed:
            if self._ws is None:
                marker = await self._connect()
                if marker is not None:
                    return dict(marker)
                continue
            msg = await self._ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT:
                try:
                    value = _decode(msg.data)
                except ValueError:
                    continue
                self.resume.backoff.reset()  # data flows: the next outage starts short
                record = as_message(value)
                if record is not None:
                    self.resume.received(record)
                    return record
                continue
            if msg.type in (aiohttp.WSMsgType.PING, aiohttp.WSMsgType.PONG):
                continue
            return dict(await self._dropped(msg))
        raise StopAsyncIteration

    async def _dropped(self, msg: aiohttp.WSMessage) -> DisconnectedMarker:
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
        meaning = close_meaning(code)
        if not meaning.retry:
            raise TraceProtocolMismatch(
                f"trace protocol mismatch with {self.url}: {reason} (this SDK speaks "
                f"protocol {TRACE_PROTOCOL})",
                status=None,
            )
        if meaning.error == "too_large":
            reason = (
                f"a trace message was larger than this client's limit of "
                f"{self.max_msg_size} bytes ({reason})"
            )
        return self.resume.dropped(code, reason)

    async def aclose(self) -> None:
        """Stop: close the websocket; iteration then ends."""
        self._closed = True
        if self._ws is not None:
            await self._ws.close()
            self._ws = None
        self.connected = False
