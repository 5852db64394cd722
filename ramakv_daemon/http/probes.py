"""GET /healthz (the loop answers) and GET /readyz (store, backends, outbox), each check named."""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from ramakv_daemon.bootstrap import Daemon
from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.http.keys import DAEMON_KEY
from ramakv_daemon.ports import Backend
from ramakv_protocol.version import package_version

# Valid hex for the memory API, yet no engine writes it (a negative hash has a non-zero
# magnitude, zero is written "0"): the query finds nothing and changes nothing.
PROBE_HASH = "-0"
BACKEND_PROBE_S = 2.0  # a probe answers within this even when a backend hangs


def _answer(status: int, body: JsonObject) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    """Alive: the event loop answers. Says nothing about the store's or the backends'
    health; ``store_lock`` (a SQLite file) is the token this daemon wrote into the store's
    lock file, so ramakv-admin can tell that it talks to the daemon holding that file."""
    body: JsonObject = {"ok": True, "status": "alive", "version": package_version()}
    token = getattr(request.app[DAEMON_KEY].store, "lock_token", "")
    if token:
        body["store_lock"] = token
    return _answer(200, body)


async def readiness(daemon: Daemon) -> dict[str, JsonObject]:
    """Every check by name: {"ok": bool, "detail": str}."""
    checks: dict[str, JsonObject] = {"store": _store_check(daemon)}
    probes: dict[str, Backend] = {}
    for ns in daemon.namespaces:
        if ns.delivers and ns.steered:
            name = "backend" if not ns.key else f"backend:{ns.label}"
            if all(b is not ns.dispatcher.backend for b in probes.values()):
                probes[name] = ns.dispatcher.backend
    results = await asyncio.gather(*(_backend_check(b, daemon) for b in probes.values()))
    checks.update(zip(probes, results, strict=True))
    checks["outbox"] = _outbox_check(daemon)
    return checks


async def readyz(request: web.Request) -> web.Response:
    """Ready: 200 when every check passes, else 503; the body names each check."""
    checks = await readiness(request.app[DAEMON_KEY])
    ok = all(c["ok"] for c in checks.values())
    return _answer(200 if ok else 503, {"ok": ok, "checks": checks})


def _store_check(daemon: Daemon) -> JsonObject:
    problem = getattr(daemon.store, "problem", None)
    why = problem() if problem is not None else None
    if why is None and daemon.committer.last_error is not None:
        why = f"the last commit failed: {daemon.committer.last_error}"
    if why is not None:
        return {"ok": False, "detail": why}
    return {"ok": True, "detail": "writable (the last commit succeeded)"}


async def _backend_check(backend: Backend, daemon: Daemon) -> JsonObject:
    if backend.name == "noop":
        return {"ok": True, "detail": "noop backend (nothing is steered)"}
    limit = min(BACKEND_PROBE_S, daemon.config.backend_timeout_s)
    try:
        result, _ = await asyncio.wait_for(backend.query([PROBE_HASH]), limit)
    except TimeoutError:
        return {"ok": False, "detail": f"no answer to a query within {limit:g} s"}
    if not result.ok:
        return {"ok": False, "detail": f"query failed: {result.status} {result.detail}".strip()}
    return {"ok": True, "detail": f"answers queries ({backend.name})"}


def _outbox_check(daemon: Daemon) -> JsonObject:
    backlog = sum(ns.dispatcher.backlog for ns in daemon.namespaces)
    bound = daemon.config.ready_max_evict_backlog
    if bound and backlog > bound:
        return {"ok": False, "detail": f"{backlog} evictions wait for delivery (> {bound})"}
    return {
        "ok": True,
        "detail": f"{backlog} evictions wait for delivery" + (f" (bound {bound})" if bound else ""),
    }
