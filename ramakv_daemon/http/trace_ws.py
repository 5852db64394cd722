"""GET /trace: snapshot (or replay since a seq), then one message per event."""

from __future__ import annotations

import asyncio

from aiohttp import WSCloseCode, WSMsgType, web

from ramakv_daemon.trace import SLOW_CLOSE_CODE, encode


async def trace_handler(request: web.Request) -> web.StreamResponse:
    """Stream the trace; ``?since=SEQ&epoch=E`` resumes, ``?session=ID`` filters.

    A resume whose epoch is not this run's (the daemon restarted) gets a fresh snapshot.
    """
    from ramakv_daemon.http.app import SERVICE_KEY

    service = request.app[SERVICE_KEY]
    since_raw = request.query.get("since")
    session = request.query.get("session") or None
    since: int | None = None
    if since_raw is not None:
        try:
            since = int(since_raw)
        except ValueError:
            raise web.HTTPBadRequest(text="since must be an integer") from None
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    hub = service.trace
    # Subscribing and choosing the first messages happen with no await in between,
    # so no event can slip between the snapshot/replay and the live stream.
    sub = hub.subscribe(session)
    epoch = request.query.get("epoch")
    same_run = epoch is None or epoch == hub.epoch
    replay = hub.replay(since, sub) if since is not None and same_run else None
    first = [encode(service.snapshot(session))] if replay is None else replay
    reader = asyncio.create_task(_drain_client(ws))
    try:
        for msg in first:
            await ws.send_str(msg)
        while True:
            getter = asyncio.create_task(sub.queue.get())
            done, _ = await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
            if reader in done:
                getter.cancel()
                break
            message = getter.result()
            if message is None:
                code = (
                    WSCloseCode.GOING_AWAY
                    if sub.close_reason == "daemon shutting down"
                    else SLOW_CLOSE_CODE
                )
                await ws.close(code=code, message=(sub.close_reason or "").encode()[:120])
                break
            await ws.send_str(message)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        hub.unsubscribe(sub)
        reader.cancel()
        if not ws.closed:
            await ws.close()
    return ws


async def _drain_client(ws: web.WebSocketResponse) -> None:
    """Read (and ignore) what the client sends until it closes."""
    async for msg in ws:
        if msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
            break
