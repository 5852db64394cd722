"""GET /trace (protocol 2): snapshot parts (or a replay since a seq), then one message per
event; a record cut down for size is followed by a fresh snapshot."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator

import orjson
from aiohttp import WSMsgType, web

from ramakv_daemon.bootstrap import Daemon
from ramakv_daemon.http.keys import DAEMON_KEY
from ramakv_daemon.trace.protocol import (
    MAX_HISTORY,
    PROTOCOL,
    PROTOCOL_CLOSE_CODE,
    PROTOCOL_REASON,
    SHUTDOWN_CLOSE_CODE,
    SHUTDOWN_REASON,
    SLOW_CLOSE_CODE,
    is_resync,
)
from ramakv_daemon.trace.snapshot import freeze, held_chunks, messages

log = logging.getLogger("ramakv.trace")


class OncePerClient:
    """Logs a failure once per (client address, reason): a client retrying in a loop must
    not fill the log (440 tracebacks in 16 s before)."""

    def __init__(self, limit: int = 1024) -> None:
        self.seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.limit = limit

    def warn(self, peer: str, reason: str) -> None:
        """WARNING the first time, DEBUG after."""
        key = (peer, reason)
        if key in self.seen:
            self.seen.move_to_end(key)
            log.debug("trace client %s: %s (again)", peer, reason)
            return
        self.seen[key] = None
        if len(self.seen) > self.limit:
            self.seen.popitem(last=False)
        log.warning("trace client %s: %s (logged once per client)", peer, reason)


FAILURES = OncePerClient()


def _int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer") from None


async def trace_handler(request: web.Request) -> web.StreamResponse:
    """Stream the trace; no ``protocol`` means the current one (2), another version is
    refused with 4010, ``since=SEQ&epoch=E`` resumes,
    ``session=ID`` filters, ``history=N`` sends up to N recent records before a snapshot.
    """
    daemon = request.app[DAEMON_KEY]
    since = _int(request, "since")
    history = min(max(_int(request, "history") or 0, 0), MAX_HISTORY)
    session = request.query.get("session") or None
    protocol = request.query.get("protocol")
    peer = request.remote or "?"
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    # A plain connect (websocat, a script that knows no versions) gets the current protocol;
    # only an explicit version the daemon does not speak is refused.
    if protocol and protocol != str(PROTOCOL):
        FAILURES.warn(peer, f"refused: asked for protocol {protocol!r}")
        await ws.close(code=PROTOCOL_CLOSE_CODE, message=PROTOCOL_REASON.encode())
        return ws
    hub = daemon.trace
    namespaces = daemon.namespaces

    def chunks_of(sid: str) -> set[str]:
        owner = namespaces.owner(sid)
        m = namespaces.managers[owner] if owner is not None else daemon.default.manager
        return held_chunks(m.sessions.get(sid), m.forks.of(sid))

    # Subscribing and freezing the first messages happen with no await in between, so no
    # event can slip between the snapshot/replay and the live stream.
    sub = hub.subscribe(session, chunks_of if session is not None else None)
    epoch = request.query.get("epoch")
    same_run = epoch is None or epoch == hub.epoch
    replay = hub.replay(since, sub) if since is not None and same_run else None
    reader = asyncio.create_task(_drain_client(ws))
    try:
        if replay is None:
            recent = hub.recent(history, sub) if history else []
            snapshot = _snapshot(daemon, session)
            header = await snapshot.__anext__()  # frozen here: its first step never awaits
            for text in recent:
                await ws.send_str(text)
            await ws.send_str(header)
            async for text in snapshot:
                await ws.send_str(text)
            skip_to = 0
        else:
            skip_to = await _send_all(ws, daemon, session, replay)
        while True:
            getter = asyncio.create_task(sub.queue.get())
            done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done:
                getter.cancel()
                break
            # Everything already queued goes out in this turn of the loop: one message a
            # turn fell behind whenever the loop was busy (the start-up shared-count warm-up
            # takes a slice of every turn: 10 s of it left a follower 6 s behind).
            texts: list[str | None] = [getter.result()]
            while texts[-1] is not None and not sub.queue.empty():
                texts.append(sub.queue.get_nowait())
            closing = texts[-1] is None
            out = [t for t in texts if t is not None]
            if skip_to:  # already in the snapshot sent after a resync record
                out = [t for t in out if orjson.loads(t).get("seq", 0) > skip_to]
            if out:
                skip_to = await _send_all(ws, daemon, session, out)
            if closing:
                shutdown = sub.close_reason == SHUTDOWN_REASON
                code = SHUTDOWN_CLOSE_CODE if shutdown else SLOW_CLOSE_CODE
                await ws.close(code=code, message=(sub.close_reason or "").encode()[:120])
                break
    except (ConnectionError, asyncio.CancelledError):
        pass
    except Exception as err:  # a client gone mid-send: one line, never a traceback per try
        FAILURES.warn(peer, f"stream ended: {type(err).__name__}: {err}")
    finally:
        hub.unsubscribe(sub)
        reader.cancel()
        if not ws.closed:
            await ws.close()
    return ws


async def _snapshot(daemon: Daemon, session: str | None) -> AsyncIterator[str]:
    """A fresh snapshot's messages (frozen at the first step, encoded in slices)."""
    ns = daemon.namespaces
    hub = daemon.trace
    frozen = freeze(
        ns.managers,
        daemon.default.manager,
        hub.seq,
        hub.epoch,
        session,
        ns.owner(session) if session is not None else None,
        daemon.config.node_id if daemon.ownership.shared else "",
    )
    async for text in messages(frozen):
        yield text


async def _send_all(
    ws: web.WebSocketResponse, daemon: Daemon, session: str | None, texts: list[str]
) -> int:
    """Send ``texts``; after a resync record send a fresh snapshot and return its seq (the
    queued records up to it are then skipped), else 0."""
    skip_to = 0
    for text in texts:
        if skip_to and orjson.loads(text).get("seq", 0) <= skip_to:
            continue
        await ws.send_str(text)
        if is_resync(text):
            skip_to = daemon.trace.seq
            async for part in _snapshot(daemon, session):
                await ws.send_str(part)
    return skip_to


async def _drain_client(ws: web.WebSocketResponse) -> None:
    """Read (and ignore) what the client sends until it closes."""
    async for msg in ws:
        if msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
            break
