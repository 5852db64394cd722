"""Stock LMCache multiprocess server backend: key-addressed delete, token-addressed prefetch.

The unmodified lmcache (0.5.6) server's HTTP management API (docs/stock-stack.md):
``DELETE /cache/objects`` drops keys from L1 (demote) or every tier (evict);
``POST /cache/prefetches`` + ``GET /cache/prefetches/{id}`` warm a token sequence's chunks
from L2 into L1. Its keys are ``(chunk hash, model, kv_rank, object group, salt)``: the
daemon's chunk hashes are the hex chunk hashes, expanded here to one key per rank.
The routes moved during 2026, so :meth:`start` probes them and names any that is missing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from ramakv_daemon.ports import Backend, BackendResult, ChunkLocations, EvictMode

log = logging.getLogger("ramakv.backend")

DEFAULT_TIMEOUT = 5.0
# The server refuses a delete of more keys than this (cache_control/object_service.py).
MAX_DELETE_KEYS = 10_000
# How long prefetch_tokens waits for a submitted prefetch at most, and how often it polls.
PREFETCH_WAIT_S = 5.0
PREFETCH_POLL_S = 0.01
_LOG_BODY_MAX = 400
# Each probed route and what it gives: a missing one is named in the start-up error.
# The delete names no key (nothing is deleted); the poll names an id no prefetch has.
PROBES: tuple[tuple[str, str, dict | None], ...] = (
    ("GET", "/healthcheck", None),
    ("GET", "/status", None),
    ("GET", "/config/adapters", None),
    ("DELETE", "/cache/objects", {"keys": [], "tier": "l1"}),
    ("GET", "/cache/prefetches/_probe", None),
)
# Demote keeps the disk copy (L2) for a later prefetch; delete drops every tier. Any other
# mode (an order hint this server cannot take) is refused rather than mapped to a delete.
TIERS = {EvictMode.DEMOTE: "l1", EvictMode.DELETE: "all"}


def kv_rank(world_size: int, rank: int) -> int:
    """lmcache's ObjectKey.ComputeKVRank for one node: (world<<24)|(rank<<16)|(local<<8)|local."""
    return (world_size << 24) | (rank << 16) | (world_size << 8) | rank


@dataclass(slots=True)
class Capabilities:
    """What the probe at start found: server facts and the routes that are missing."""

    probed: bool = False
    healthy: bool = False
    chunk_size: int | None = None
    hash_algorithm: str | None = None
    l2_adapters: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    problem: str = ""

    def as_dict(self) -> dict[str, object]:
        """JSON-ready, for logs and the daemon's answers."""
        return {
            "probed": self.probed,
            "healthy": self.healthy,
            "chunk_size": self.chunk_size,
            "hash_algorithm": self.hash_algorithm,
            "l2_adapters": list(self.l2_adapters),
            "missing_routes": list(self.missing),
            "problem": self.problem,
        }


class LMCacheMPBackend(Backend):
    """Steers a stock LMCache multiprocess server's HTTP API; never raises on I/O errors."""

    name = "lmcache_mp"
    takes_keeps = False  # the stock server acts at once and knows no keeps

    def __init__(
        self,
        base_url: str,
        model_name: str,
        world_size: int = 1,
        cache_salt: str = "",
        timeout: float = DEFAULT_TIMEOUT,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``model_name`` is vLLM's ``--model`` string (the server keys by it, not by
        ``--served-model-name``); one key per rank of ``world_size``."""
        if not model_name:
            raise ValueError("lmcache_mp needs model_name (vLLM's --model string)")
        if world_size < 1 or world_size > 255:
            raise ValueError(f"world_size must be in 1..255, got {world_size}")
        self.base_url = base_url.rstrip("/")
        self.model_name = model_name
        self.world_size = world_size
        self.cache_salt = cache_salt
        self.ranks = [kv_rank(world_size, r) for r in range(world_size)]
        self.capabilities = Capabilities()
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout),
            transport=transport,
            headers={"Accept": "application/json"},
        )

    # -- start-up probe ---------------------------------------------------------------------
    async def start(self) -> Capabilities:
        """Probe health and capabilities; log one clear error naming what is missing."""
        caps = Capabilities(probed=True)
        answers: dict[str, tuple[int, object]] = {}
        for method, path, payload in PROBES:
            try:
                resp = await self._client.request(method, path, json=payload)
            except httpx.HTTPError as exc:
                caps.problem = f"{self.base_url} unreachable ({type(exc).__name__}: {exc})"
                self.capabilities = caps
                log.error("lmcache_mp: %s; probing again on the next call", caps.problem)
                caps.probed = False
                return caps
            answers[path] = (resp.status_code, _json(resp))
        for path, (status, body) in answers.items():
            # A route the server lacks answers FastAPI's {"detail": "Not Found"} (405 when
            # the path serves other methods); the prefetch probe's unknown id answers 404
            # with its own detail (the route is there).
            lacking = status == 405 or (
                status == 404 and isinstance(body, dict) and body.get("detail") == "Not Found"
            )
            if lacking:
                caps.missing.append(path.replace("/_probe", "/{id}"))
        status, health = answers["/healthcheck"]
        caps.healthy = status == 200 and isinstance(health, dict)
        _, info = answers["/status"]
        if isinstance(info, dict):
            caps.chunk_size = _int(info.get("chunk_size"))
            algo = info.get("hash_algorithm")
            caps.hash_algorithm = algo if isinstance(algo, str) else None
        _, adapters = answers["/config/adapters"]
        if isinstance(adapters, dict) and isinstance(adapters.get("adapters"), list):
            caps.l2_adapters = [
                str(a.get("type_name")) for a in adapters["adapters"] if isinstance(a, dict)
            ]
        problems = []
        if caps.missing:
            problems.append(
                "routes missing: " + ", ".join(caps.missing) + " (lmcache 0.5.6's "
                "/cache/objects, /cache/prefetches, /healthcheck, /status, /config/adapters)"
            )
        if not caps.healthy:
            problems.append(f"GET /healthcheck answered {status}: {health}")
        if caps.hash_algorithm not in (None, "blake3"):
            problems.append(
                f"hash_algorithm is {caps.hash_algorithm!r}: keys computed outside the engine "
                "match only with blake3 (start the server with --hash-algorithm blake3)"
            )
        if "/cache/objects" not in caps.missing and not caps.l2_adapters:
            problems.append("no L2 adapter: a demote would lose the chunks (none to prefetch)")
        caps.problem = "; ".join(problems)
        self.capabilities = caps
        if caps.problem:
            log.error("lmcache_mp %s: %s", self.base_url, caps.problem)
        else:
            log.info("lmcache_mp %s: %s", self.base_url, caps.as_dict())
        return caps

    def _missing(self, route: str) -> BackendResult | None:
        if route in self.capabilities.missing:
            return BackendResult(False, 404, f"lmcache_mp {self.base_url} has no {route} route")
        return None

    # -- the port ---------------------------------------------------------------------------
    def keys(self, chunk_hashes: Sequence[str]) -> list[dict[str, object]]:
        """The server's object keys of these chunks: one per rank, object group 0."""
        return [
            {
                "chunk_hash_hex": h,
                "model_name": self.model_name,
                "kv_rank": rank,
                "object_group_id": 0,
                "cache_salt": self.cache_salt,
            }
            for h in chunk_hashes
            for rank in self.ranks
        ]

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        """DELETE /cache/objects {keys, tier}: l1 for a demote, all for a delete."""
        hashes = list(chunk_hashes)
        if not hashes:
            return BackendResult(ok=True, status=0, detail="nothing to evict")
        tier = TIERS.get(mode)
        if tier is None:
            return BackendResult(False, 400, f"lmcache_mp cannot evict in mode {mode.value!r}")
        if (missing := self._missing("/cache/objects")) is not None:
            return missing
        per_call = max(1, MAX_DELETE_KEYS // self.world_size)
        deleted = skipped = 0
        for i in range(0, len(hashes), per_call):
            part = hashes[i : i + per_call]
            payload = {"keys": self.keys(part), "tier": tier}
            result, body = await self._call("DELETE", "/cache/objects", payload, len(part))
            if not result.ok or body is None:
                return result
            if body.get("ok") is not True:
                detail = str(body.get("error") or "the server answered ok: false")
                return BackendResult(False, result.status, detail, body)
            deleted += _int(body.get("deleted")) or 0
            skipped += _int(body.get("skipped")) or 0
        return BackendResult(True, 200, body={"deleted": deleted, "skipped": skipped, "ok": True})

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        """The stock server prefetches token sequences, not hashes: refused, saying so (the
        proxy prefetches the restored request's own tokens, see :meth:`prefetch_tokens`)."""
        if not chunk_hashes:
            return BackendResult(ok=True, status=0, detail="nothing to prefetch")
        return BackendResult(
            False,
            501,
            "lmcache_mp prefetches by token ids (POST /cache/prefetches), not by chunk "
            "hash: the proxy prefetches a restored request's tokens (docs/stock-stack.md)",
        )

    async def prefetch_tokens(
        self, token_ids: Sequence[int], wait_s: float = PREFETCH_WAIT_S
    ) -> BackendResult:
        """POST /cache/prefetches {model_name, world_size, token_ids, cache_salt}, then poll
        GET /cache/prefetches/{id} until completed (the first completed poll consumes the
        id) or ``wait_s``; the answer's body has ``found_keys`` and ``total_keys``. A 503
        means no engine registered its KV layout yet."""
        if (missing := self._missing("/cache/prefetches")) is not None:
            return missing
        payload = {
            "model_name": self.model_name,
            "world_size": self.world_size,
            "token_ids": list(token_ids),
            "cache_salt": self.cache_salt,
        }
        result, body = await self._call("POST", "/cache/prefetches", payload, len(payload))
        if not result.ok or body is None or body.get("status") == "noop":
            return result
        request_id = body.get("request_id")
        if not isinstance(request_id, str):
            return BackendResult(False, result.status, "prefetch answer has no request_id", body)
        deadline = time.monotonic() + wait_s
        while True:
            polled, state = await self._call("GET", f"/cache/prefetches/{request_id}", None, 1)
            if not polled.ok or state is None or state.get("status") == "completed":
                return polled
            if time.monotonic() >= deadline:
                return BackendResult(False, 0, f"prefetch {request_id} pending after {wait_s}s")
            await asyncio.sleep(PREFETCH_POLL_S)

    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        """The stock server lists no key's tiers (no L1 listing, fs L2 has none): unknown."""
        if not chunk_hashes:
            return BackendResult(ok=True, status=0, detail="nothing to query"), ChunkLocations()
        detail = "lmcache_mp has no per-chunk location query"
        return BackendResult(False, 501, detail), ChunkLocations()

    async def health(self) -> BackendResult:
        """GET /healthcheck."""
        result, _ = await self._call("GET", "/healthcheck", None, 0)
        return result

    async def close(self) -> None:
        """Release pooled connections."""
        await self._client.aclose()

    async def _call(
        self, method: str, path: str, payload: dict | None, count: int
    ) -> tuple[BackendResult, dict | None]:
        """One logged round trip; every failure becomes a not-ok BackendResult."""
        if not self.capabilities.probed:
            await self.start()  # the server was down at start: probe once it answers
        url = self.base_url + path
        started = time.perf_counter()
        try:
            resp = await self._client.request(method, path, json=payload)
        except httpx.HTTPError as exc:
            ms = (time.perf_counter() - started) * 1000
            detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            log.warning("%s %s count=%d status=0 ms=%.1f error=%s", method, url, count, ms, detail)
            return BackendResult(ok=False, status=0, detail=detail), None
        ms = (time.perf_counter() - started) * 1000
        log_fn = log.info if resp.is_success else log.warning
        text = resp.text
        log_fn(
            "%s %s count=%d status=%d ms=%.1f response=%s",
            method,
            url,
            count,
            resp.status_code,
            ms,
            text[:_LOG_BODY_MAX],
        )
        body = _json(resp)
        if not isinstance(body, dict):
            detail = "answer is not a JSON object" if resp.is_success else _short(text)
            return BackendResult(ok=False, status=resp.status_code, detail=detail), None
        if not resp.is_success:
            return BackendResult(False, resp.status_code, _detail(body, text), body), body
        return BackendResult(ok=True, status=resp.status_code, body=body), body


def _json(resp: httpx.Response) -> object:
    try:
        return resp.json() if resp.content else None
    except ValueError:
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _detail(body: dict, text: str) -> str:
    """FastAPI's ``detail``: a string, or a list of validation errors (their messages)."""
    detail = body.get("detail")
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail)
    return str(detail) if detail else _short(text)


def _short(text: str) -> str:
    return " ".join(text.split())[:200] or "empty answer"
