"""The memory API (/memory/prefetch and its cancel, /memory/evict, /memory/keep,
/memory/order, /memory/query) for lmcache 0.5.6's internal API server, plus ``install()``
which hooks it in. Wire format: docs/lmcache-wire.md."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ascend_ext import forwarding
from ascend_ext.api_server_start import start_or_raise
from ascend_ext.deferred_evict import parse_defer, parse_generation, parse_not_after
from ascend_ext.memory_ops import (
    MemoryOps,
    parse_cancel_id,
    parse_hashes,
    parse_locations,
    parse_lookup_id,
)
from ascend_ext.order_hint import parse_position
from ascend_ext.request_error import RequestError

log = logging.getLogger("ascend_ext.memory")

router = APIRouter()

# One MemoryOps per engine, shared by every app that serves it (keyed by id; the engine is
# kept alive by the value so the id cannot be reused).
_OPS: dict[int, tuple[Any, MemoryOps]] = {}
_OPS_LOCK = threading.Lock()
_INSTALLED = False


def ops_for(engine: Any) -> MemoryOps:
    """The MemoryOps bound to this engine (created on first use)."""
    with _OPS_LOCK:
        entry = _OPS.get(id(engine))
        if entry is None or entry[0] is not engine:
            entry = (engine, MemoryOps(engine))
            _OPS[id(engine)] = entry
        return entry[1]


def forget_engine(engine: Any) -> None:
    """Drop and close the MemoryOps of an engine that is being destroyed."""
    with _OPS_LOCK:
        entry = _OPS.pop(id(engine), None)
    if entry is not None:
        entry[1].close()


def _error(status: int, message: str) -> JSONResponse:
    """Every error answer is {"error": message}."""
    return JSONResponse({"error": message}, status_code=status)


async def _body(request: Request) -> dict:
    """The request's JSON object, or RequestError."""
    try:
        body = json.loads(await request.body() or b"null")
    except ValueError as exc:
        raise RequestError(f"body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError("body must be a JSON object")
    return body


def _target(request: Request) -> MemoryOps | list[str] | JSONResponse:
    """Worker: its engine's ops. Scheduler (port offset 0): worker URLs. Else a 503."""
    state = request.app.state
    adapter = getattr(state, "lmcache_adapter", None)
    engine = getattr(adapter, "lmcache_engine", None)
    if engine is not None:
        if getattr(engine, "storage_manager", None) is None:
            return _error(503, "LMCache engine has no storage manager in this process")
        return ops_for(engine)
    if getattr(state, "ramakv_port_offset", None) == 0:
        return list(getattr(state, "ramakv_worker_urls", []) or [])
    return _error(503, "no LMCache engine in this process and it is not the scheduler")


async def _handle(kind: str, request: Request) -> JSONResponse:
    """Validate, then run locally or forward to every worker."""
    try:
        body = await _body(request)
        hashes = parse_hashes(body)
        locations = parse_locations(body) if kind in ("evict", "order") else None
        position = parse_position(body) if kind == "order" else None
        lookup_id = parse_lookup_id(body) if kind == "prefetch" else None
        generation = parse_generation(body) if kind in ("evict", "keep") else None
        defer_s = parse_defer(body) if kind == "evict" else 0.0
        not_after = parse_not_after(body) if kind == "evict" else None
        if kind == "keep" and generation is None:
            raise RequestError("missing required field 'generation'")
    except RequestError as exc:
        return _error(400, str(exc))
    target = _target(request)
    if isinstance(target, JSONResponse):
        return target
    if isinstance(target, list):
        if lookup_id is not None:
            body["lookup_id"] = lookup_id
        return await _forward(kind, target, body)
    try:
        if kind == "prefetch":
            assert lookup_id is not None  # parsed, or made up, for every prefetch
            target.prefetch(hashes, lookup_id)
            return JSONResponse(
                {"status": "prefetch_started", "lookup_id": lookup_id, "num_chunks": len(hashes)}
            )
        if kind == "evict" and generation is None and not defer_s and not_after is None:
            n = await asyncio.to_thread(target.evict, hashes, locations)
            return JSONResponse({"status": "success", "num_evicted": n})
        if kind == "evict":
            return JSONResponse(
                await asyncio.to_thread(
                    target.evict_with, hashes, locations, generation, defer_s, not_after
                )
            )
        if kind == "order":
            assert position is not None  # parsed for every order
            return JSONResponse(await asyncio.to_thread(target.order, hashes, position, locations))
        if kind == "keep":
            # Off the loop: a keep meeting a removal under way waits for it.
            return JSONResponse(await asyncio.to_thread(target.keep, hashes, generation or 0))
        return JSONResponse(await asyncio.to_thread(target.query, hashes))
    except RequestError as exc:
        return _error(400, str(exc))
    except Exception as exc:  # an engine fault must answer, not drop the connection
        log.exception("memory %s failed", kind)
        return _error(500, f"{kind} failed: {type(exc).__name__}: {exc}")


async def _cancel(request: Request) -> JSONResponse:
    """Validate a prefetch cancel, then stop this worker's prefetch or forward it to all."""
    try:
        lookup_id = parse_cancel_id(await _body(request))
    except RequestError as exc:
        return _error(400, str(exc))
    target = _target(request)
    if isinstance(target, JSONResponse):
        return target
    if isinstance(target, list):
        return await _forward("cancel", target, {"lookup_id": lookup_id})
    # Under a lock the worker takes only between chunks: never long, off the loop anyway.
    return JSONResponse(await asyncio.to_thread(target.cancel_prefetch, lookup_id))


async def _forward(kind: str, urls: list[str], body: dict) -> JSONResponse:
    """Scheduler path: the same (validated) request to every worker, merged answer."""
    if not urls:
        return _error(503, "scheduler knows no workers to forward to")
    fields = {
        "cancel": ("lookup_id",),
        "prefetch": ("chunk_hashes", "lookup_id"),
        "evict": ("chunk_hashes", "locations", "generation", "defer_s", "not_after_ns"),
        "keep": ("chunk_hashes", "generation"),
        "order": ("chunk_hashes", "position", "locations"),
    }.get(kind, ("chunk_hashes",))
    payload = {k: body[k] for k in fields if body.get(k) is not None}
    path = "/memory/prefetch/cancel" if kind == "cancel" else f"/memory/{kind}"
    answers = await forwarding.forward_all(urls, path, payload)
    status, merged = forwarding.merge(kind, answers, payload)
    if status != 200:
        log.warning("forwarded %s: %s", kind, merged)
    return JSONResponse(merged, status_code=status)


@router.post("/memory/prefetch")
async def prefetch(request: Request) -> JSONResponse:
    """Start an asynchronous disk -> DDR load of the given chunks."""
    return await _handle("prefetch", request)


@router.post("/memory/prefetch/cancel")
async def prefetch_cancel(request: Request) -> JSONResponse:
    """Stop the queued or running prefetches of a ``lookup_id`` before their next chunk."""
    return await _cancel(request)


@router.post("/memory/evict")
async def evict(request: Request) -> JSONResponse:
    """Remove chunks from the given tiers (every tier when no locations)."""
    return await _handle("evict", request)


@router.post("/memory/keep")
async def keep(request: Request) -> JSONResponse:
    """Cancel deferred deletes of chunks the daemon saw referenced again (generation)."""
    return await _handle("keep", request)


@router.post("/memory/order")
async def order(request: Request) -> JSONResponse:
    """Move chunks to the cold (evicted first) or warm end of the tiers' eviction order."""
    return await _handle("order", request)


@router.post("/memory/query")
async def query(request: Request) -> JSONResponse:
    """Answer hash -> [tiers holding it]."""
    return await _handle("query", request)


@router.get("/memory/prefetch/{lookup_id}")
async def prefetch_status(lookup_id: str, request: Request) -> JSONResponse:
    """Progress of one of this worker's recent prefetches (not forwarded by the scheduler)."""
    target = _target(request)
    if isinstance(target, JSONResponse):
        return target
    if isinstance(target, list):
        return _error(404, "prefetch status is kept per worker; ask the worker's port")
    status = target.prefetch_status(lookup_id)
    if status is None:
        return _error(404, f"unknown lookup_id '{lookup_id}'")
    return JSONResponse(status)


def install() -> None:
    """Hook the memory API into lmcache's internal API server (call before it is built).

    Wraps ``api_server._build_app`` so every app gets these routes, and
    ``InternalAPIServer.__init__`` so each app learns its port offset and its workers;
    replaces ``InternalAPIServer.start`` so a server that cannot listen fails start-up.
    """
    global _INSTALLED
    if _INSTALLED:
        return
    from lmcache.v1.internal_api_server import api_server

    original_build = api_server._build_app
    original_init = api_server.InternalAPIServer.__init__

    def build_app() -> Any:  # lmcache's FastAPI app (lmcache is untyped)
        app = original_build()
        app.include_router(router)
        return app

    def init(self: Any, lmcache_manager: Any) -> None:
        original_init(self, lmcache_manager)
        if not getattr(self, "enable", False):
            return
        config = lmcache_manager.config
        start = config.internal_api_server_port_start
        md = lmcache_manager.lmcache_engine_metadata
        count = int(getattr(md, "local_world_size", 0) or getattr(md, "world_size", 0) or 0)
        self.app.state.ramakv_port_offset = self.port - start
        self.app.state.ramakv_worker_urls = forwarding.worker_urls_from(
            config.internal_api_server_host, start, count
        )

    api_server._build_app = build_app
    api_server.InternalAPIServer.__init__ = init
    # A port in use fails the engine's start-up, naming it (lmcache would serve without us).
    api_server.InternalAPIServer.start = start_or_raise
    _INSTALLED = True
