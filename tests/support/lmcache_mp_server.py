"""A stand-in for the stock LMCache (0.5.6) multiprocess server's HTTP API (aiohttp, loopback).

It speaks the real server's wire format (tests/backends/test_lmcache_mp_real.py holds the
two to the same answers): ``DELETE /cache/objects`` {keys, tier: l1|l2|all} ->
{deleted, skipped, ok}; ``POST /cache/prefetches`` {model_name, world_size, token_ids,
cache_salt} -> 202 {request_id, chunks, status: submitted} (503 until an engine
registered, as the real one); ``GET /cache/prefetches/{id}`` -> pending / completed
{found_keys, total_keys}, the first completed poll consumes the id (then 404);
``/healthcheck``, ``/status``, ``/config``, ``/config/adapters``; FastAPI's
``{"detail": "Not Found"}`` for any other route. Its tiers: two sets of keys (L1, L2);
``store(token_ids)`` is an engine's store (both tiers). ``drop_routes`` removes routes, as
on a server whose API moved. With ``l2_dir`` its L2 is also a folder laid out as the fs
adapter's (one file per key, never rewritten; a delete unlinks it; a prefetch finds only
keys whose file is there, as the real one stats it).
"""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path
from typing import Any

from aiohttp import web

from ramakv_daemon.adapters.backends.lmcache_fs_l2 import file_name
from ramakv_proxy.stock_keys import chunk_hashes

Key = tuple[str, str, int, int, str]  # chunk_hash_hex, model_name, kv_rank, group, salt
#: What the daemon's probe of a healthy stock server (real, or this stand-in) reports.
PROBED_CAPS = {
    "probed": True,
    "healthy": True,
    "chunk_size": 256,
    "hash_algorithm": "blake3",
    "l2_adapters": ["fs"],
    "missing_routes": [],
    "problem": "",
}
KEY_FIELDS = ("chunk_hash_hex", "model_name", "kv_rank", "object_group_id", "cache_salt")


def _rank(world: int, rank: int) -> int:
    return (world << 24) | (rank << 16) | (world << 8) | rank


class FakeLMCacheMPServer:
    """A real HTTP server on 127.0.0.1 with the stock server's /cache wire format."""

    def __init__(
        self,
        chunk_size: int = 256,
        hash_algorithm: str = "blake3",
        l2_dir: Path | None = None,
        object_bytes: int = 1024,
    ) -> None:
        self.chunk_size = chunk_size
        self.l2_dir = l2_dir
        self.object_bytes = object_bytes
        self.hash_algorithm = hash_algorithm
        self.l1: set[Key] = set()
        self.l2: set[Key] = set()
        self.locked: set[Key] = set()  # L1 keys a running transfer holds (skipped)
        self.registered: set[tuple[str, int]] = set()  # (model, world) with a KV layout
        self.jobs: dict[str, tuple[int, int]] = {}  # request_id -> (found, total)
        self.pending_polls = 0  # how many polls answer "pending" before "completed"
        self.drop_routes: set[str] = set()
        self.requests: list[tuple[str, str, Any]] = []
        self._seq = 0
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- what an engine does ------------------------------------------------------------------
    def register(self, model: str, world: int = 1) -> None:
        """An engine registered its KV layout: prefetches for it are served."""
        self.registered.add((model, world))

    def keys_of(self, token_ids: list[int], model: str, world: int = 1, salt: str = "") -> set[Key]:
        hashes = chunk_hashes(token_ids, self.chunk_size)
        return {(h, model, _rank(world, r), 0, salt) for h in hashes for r in range(world)}

    def store(self, token_ids: list[int], model: str, world: int = 1, salt: str = "") -> None:
        """An engine stored a prompt's complete chunks: in L1 and written through to L2."""
        keys = self.keys_of(token_ids, model, world, salt)
        self.l1 |= keys
        self.l2 |= keys
        for key in keys if self.l2_dir is not None else ():
            path = self._file(key)
            if not path.exists():  # the real adapter skips a key already on disk
                path.write_bytes(b"\0" * self.object_bytes)

    def _file(self, key: Key) -> Path:
        assert self.l2_dir is not None
        h, model, rank, group, salt = key
        return self.l2_dir / file_name(model, rank, h, salt, group)

    def _on_disk(self, keys: set[Key]) -> set[Key]:
        if self.l2_dir is None:
            return keys
        return {k for k in keys if self._file(k).exists()}

    # -- server -------------------------------------------------------------------------------
    async def __aenter__(self) -> FakeLMCacheMPServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._route)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def calls(self, method: str, path: str) -> list[Any]:
        return [b for m, p, b in self.requests if m == method and p == path]

    async def _route(self, request: web.Request) -> web.Response:
        body: Any = None
        if request.body_exists:
            with contextlib.suppress(ValueError):
                body = json.loads(await request.read())
        path = request.path
        self.requests.append((request.method, path, body))
        route = (request.method, path)
        if path.startswith("/cache/prefetches/"):
            route = (request.method, "/cache/prefetches/{id}")
        handler = {
            ("GET", "/healthcheck"): self._health,
            ("GET", "/status"): self._status,
            ("GET", "/config"): self._config,
            ("GET", "/config/adapters"): self._adapters,
            ("DELETE", "/cache/objects"): self._delete,
            ("POST", "/cache/prefetches"): self._submit,
            ("GET", "/cache/prefetches/{id}"): self._poll,
        }.get(route)
        if handler is None or route[1] in self.drop_routes:
            return web.json_response({"detail": "Not Found"}, status=404)
        return handler(request, body)

    def _health(self, request: web.Request, body: Any) -> web.Response:
        return web.json_response({"status": "healthy"})

    def _status(self, request: web.Request, body: Any) -> web.Response:
        return web.json_response(
            {
                "is_healthy": True,
                "engine_type": "MPCacheServer",
                "chunk_size": self.chunk_size,
                "hash_algorithm": self.hash_algorithm,
                "active_sessions": 0,
                "storage_manager": {"l1_manager": {"total_object_count": len(self.l1)}},
            }
        )

    def _config(self, request: web.Request, body: Any) -> web.Response:
        mp = {"chunk_size": self.chunk_size, "hash_algorithm": self.hash_algorithm}
        return web.json_response({"mp": mp, "storage_manager": {}})

    def _adapters(self, request: web.Request, body: Any) -> web.Response:
        adapter = {"index": 0, "type_name": "fs", "tier": "l2", "primary": True}
        return web.json_response({"adapters": [{**adapter, "reconfigurable": False}]})

    def _delete(self, request: web.Request, body: Any) -> web.Response:
        if not isinstance(body, dict) or not isinstance(body.get("keys"), list):
            return _invalid("keys", "Field required")
        tier = body.get("tier", "l2")
        if tier not in ("l1", "l2", "all"):
            return _invalid("tier", "Input should be 'l1', 'l2' or 'all'")
        keys: list[Key] = []
        for i, k in enumerate(body["keys"]):
            try:
                bytes.fromhex(k["chunk_hash_hex"])
                defaults = ("", "", 0, 0, "")
                keys.append(tuple(k.get(f, d) for f, d in zip(KEY_FIELDS, defaults, strict=True)))
            except (ValueError, TypeError, KeyError) as err:
                return web.json_response({"detail": f"keys[{i}]: {err}"}, status=400)
        deleted = skipped = 0
        if tier in ("l1", "all"):
            for key in keys:
                if key in self.locked and not body.get("force"):
                    skipped += 1
                elif key in self.l1:
                    self.l1.discard(key)
                    deleted += 1
        if tier in ("l2", "all"):
            self.l2.difference_update(keys)
            for key in keys if self.l2_dir is not None else ():
                self._file(key).unlink(missing_ok=True)
            deleted += len(keys)  # the real server counts the batch, present or not
        return web.json_response({"deleted": deleted, "skipped": skipped, "ok": True})

    def _submit(self, request: web.Request, body: Any) -> web.Response:
        if not isinstance(body, dict) or not isinstance(body.get("token_ids"), list):
            return _invalid("token_ids", "Field required")
        model, world = str(body.get("model_name")), int(body.get("world_size") or 0)
        if (model, world) not in self.registered:
            detail = (
                f"no layout registered for model_name={model!r} world_size={world}; the "
                "model has not allocated KV cache on this node yet"
            )
            return web.json_response({"detail": detail}, status=503)
        keys = self.keys_of(body["token_ids"], model, world, body.get("cache_salt", ""))
        if not keys:
            return web.json_response({"chunks": 0, "status": "noop"}, status=202)
        found = self._on_disk(keys & self.l2)
        self.l1 |= found  # a warm load: L2 -> L1
        self._seq += 1
        request_id = f"warm-{self._seq}"
        self.jobs[request_id] = (len(found), len(keys))
        chunks = len(keys) // world
        return web.json_response(
            {"request_id": request_id, "chunks": chunks, "status": "submitted"}, status=202
        )

    def _poll(self, request: web.Request, body: Any) -> web.Response:
        request_id = request.path.rsplit("/", 1)[1]
        if request_id not in self.jobs:
            detail = (
                f"unknown prefetch request_id={request_id!r} (already completed or never submitted)"
            )
            return web.json_response({"detail": detail}, status=404)
        if self.pending_polls > 0:
            self.pending_polls -= 1
            return web.json_response({"request_id": request_id, "status": "pending"})
        found, total = self.jobs.pop(request_id)
        return web.json_response(
            {
                "request_id": request_id,
                "status": "completed",
                "found_keys": found,
                "total_keys": total,
            }
        )


def _invalid(field: str, msg: str) -> web.Response:
    detail = [{"type": "missing", "loc": ["body", field], "msg": msg}]
    return web.json_response({"detail": detail}, status=422)
