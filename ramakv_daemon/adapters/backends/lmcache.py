"""LMCache memory-API backend: prefetch (and its cancel) / evict / keep / order / query over
HTTP."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Sequence

import httpx

from ramakv_daemon.ports import (
    Backend,
    BackendResult,
    ChunkLocations,
    EvictMode,
    EvictRequest,
    OrderPosition,
    SentEvict,
    WriteCheck,
)

log = logging.getLogger("ramakv.backend")

# The original project's hard-coded budget: the service is local, 5 s is enough to spot hangs.
DEFAULT_TIMEOUT = 5.0
# Demotion keeps chunks on disk so snapshot_restore's prefetch can bring them back.
DEFAULT_DEMOTE_LOCATIONS: tuple[str, ...] = ("LocalCPUBackend",)
# Logged responses are cut so a large query answer cannot flood the log.
_LOG_BODY_MAX = 400
# Evictions and keeps have their own small pool: however many prefetches hang on a slow
# cache (each holds a connection until its timeout), an eviction never waits for one.
EVICT_CONNECTIONS = 4
PREFETCH_CONNECTIONS = 32
# A memory API without /memory/order answers these (stock: 404; an older ascend_ext: 405).
_NO_ROUTE = (404, 405)


class LMCacheBackend(Backend):
    """Steers an LMCache memory API (ascend_ext) at ``base_url``; never raises on I/O errors."""

    name = "lmcache"
    takes_keeps = True

    def __init__(
        self,
        base_url: str,
        timeout: float = DEFAULT_TIMEOUT,
        *,
        delete_locations: Sequence[str] | None = None,
        demote_locations: Sequence[str] | None = DEFAULT_DEMOTE_LOCATIONS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """Build one pooled client; ``None`` tier lists mean "every tier" (no locations sent)."""
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.delete_locations = list(delete_locations) if delete_locations else None
        self.demote_locations = list(demote_locations) if demote_locations else None

        def client(connections: int) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=self.base_url,
                timeout=httpx.Timeout(timeout),
                transport=transport,
                headers={"Accept": "application/json"},
                limits=httpx.Limits(
                    max_connections=connections, max_keepalive_connections=connections
                ),
            )

        self._client = client(EVICT_CONNECTIONS)  # evict, keep, query
        self._prefetch_client = client(PREFETCH_CONNECTIONS)
        # Set by the first 404/405 of /memory/order: the route is missing, none is sent
        # any more (delivery demotes instead); a restart of the daemon asks again.
        self.order_missing = False

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        """POST /memory/prefetch {chunk_hashes, lookup_id=tag}."""
        hashes = list(chunk_hashes)
        if not hashes:
            return BackendResult(ok=True, status=0, detail="nothing to prefetch")
        result, _ = await self._post(
            "/memory/prefetch",
            {"chunk_hashes": hashes, "lookup_id": tag},
            len(hashes),
            self._prefetch_client,
        )
        return result

    async def cancel_prefetch(self, tag: str) -> BackendResult:
        """POST /memory/prefetch/cancel {lookup_id=tag}, on the prefetch pool (an evict
        never waits for it); a stock memory API answers 404 (an older ascend_ext 405)."""
        payload = {"lookup_id": tag}
        result, _ = await self._post("/memory/prefetch/cancel", payload, 0, self._prefetch_client)
        return result

    async def evict(self, chunk_hashes: Sequence[str], mode: EvictMode) -> BackendResult:
        """POST /memory/evict {chunk_hashes, locations?}; the mode picks the tier list."""
        hashes = list(chunk_hashes)
        if not hashes:
            return BackendResult(ok=True, status=0, detail="nothing to evict")
        locations = self.demote_locations if mode == EvictMode.DEMOTE else self.delete_locations
        payload: dict = {"chunk_hashes": hashes}
        if locations:
            payload["locations"] = locations
        result, _ = await self._post("/memory/evict", payload, len(hashes))
        return result

    async def evict_checked(
        self, chunk_hashes: Sequence[str], mode: EvictMode, at_write: WriteCheck
    ) -> SentEvict:
        """An evict whose request is decided at the moment the body is written.

        ``at_write`` runs when the connection is ready and the body goes out (a streamed
        body is produced only then), so a chunk referenced again while the request waited
        for a connection or a connect is not in it. The deferral fields (defer_s,
        generation, not_after_ns) go out with a deferred request only.
        """
        written: list[EvictRequest] = []
        decided = [0.0]
        locations = self.demote_locations if mode == EvictMode.DEMOTE else self.delete_locations

        async def body() -> AsyncIterator[bytes]:
            request = at_write(list(chunk_hashes))
            written.append(request)
            decided[0] = time.monotonic()
            payload: dict[str, object] = {"chunk_hashes": request.chunk_hashes}
            if request.deferred:
                payload["defer_s"] = request.defer_s
                payload["generation"] = request.generation
                payload["not_after_ns"] = request.not_after_ns
            if locations:
                payload["locations"] = locations
            yield json.dumps(payload).encode()

        result, _ = await self._post("/memory/evict", None, len(chunk_hashes), stream=body())
        return SentEvict(result, written[0] if written else None, decided[0])

    async def order(self, chunk_hashes: Sequence[str], position: OrderPosition) -> BackendResult:
        """POST /memory/order {chunk_hashes, position}: the cold (evicted first) or warm end
        of every tier's eviction order (ascend_ext). After a 404/405 the route is known to
        be missing: logged once, then answered 404 here without a request."""
        hashes = list(chunk_hashes)
        if self.order_missing:
            return BackendResult(False, 404, "no /memory/order on this memory API")
        if not hashes:
            return BackendResult(ok=True, status=0, detail="nothing to order")
        payload = {"chunk_hashes": hashes, "position": position}
        result, _ = await self._post("/memory/order", payload, len(hashes))
        if not result.ok and result.status in _NO_ROUTE:
            self.order_missing = True
            log.warning(
                "%s has no /memory/order (HTTP %d): chunks released without a delete are "
                "left to the cache's own LRU, not ordered cold (a stock memory API; "
                "ascend_ext has it)",
                self.base_url,
                result.status,
            )
        return result

    async def keep(self, chunk_hashes: Sequence[str], generation: int) -> BackendResult:
        """POST /memory/keep {chunk_hashes, generation}: cancel older deferred deletes."""
        hashes = list(chunk_hashes)
        payload = {"chunk_hashes": hashes, "generation": generation}
        result, _ = await self._post("/memory/keep", payload, len(hashes))
        return result

    async def query(self, chunk_hashes: Sequence[str]) -> tuple[BackendResult, ChunkLocations]:
        """POST /memory/query {chunk_hashes} -> hash -> [tier names]."""
        hashes = list(chunk_hashes)
        if not hashes:
            return BackendResult(ok=True, status=0, detail="nothing to query"), ChunkLocations()
        result, body = await self._post("/memory/query", {"chunk_hashes": hashes}, len(hashes))
        if not result.ok or body is None:
            return result, ChunkLocations()
        locations = _parse_locations(body)
        if locations is None:
            bad = BackendResult(False, result.status, "query answer is not {hash: [str]}", body)
            return bad, ChunkLocations()
        return result, ChunkLocations(locations)

    async def close(self) -> None:
        """Release pooled connections."""
        await self._client.aclose()
        await self._prefetch_client.aclose()

    async def _post(
        self,
        path: str,
        payload: dict | None,
        count: int,
        client: httpx.AsyncClient | None = None,
        stream: AsyncIterator[bytes] | None = None,
    ) -> tuple[BackendResult, dict | None]:
        """One logged round trip; every failure becomes a not-ok BackendResult."""
        url = self.base_url + path
        started = time.perf_counter()
        client = client or self._client
        try:
            if stream is not None:
                resp = await client.post(
                    path, content=stream, headers={"Content-Type": "application/json"}
                )
            else:
                resp = await client.post(path, json=payload)
        except (httpx.HTTPError, httpx.StreamError) as exc:
            ms = (time.perf_counter() - started) * 1000
            detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            log.warning("POST %s count=%d status=0 ms=%.1f error=%s", url, count, ms, detail)
            return BackendResult(ok=False, status=0, detail=detail), None
        ms = (time.perf_counter() - started) * 1000
        text = resp.text
        log_fn = log.info if resp.is_success else log.warning
        log_fn(
            "POST %s count=%d status=%d ms=%.1f response=%s",
            url,
            count,
            resp.status_code,
            ms,
            text[:_LOG_BODY_MAX],
        )
        try:
            body = json.loads(text) if text else None
        except ValueError:
            body = None
        if not isinstance(body, dict):
            detail = "answer is not a JSON object" if resp.is_success else _short(text)
            return BackendResult(ok=False, status=resp.status_code, detail=detail), None
        if not resp.is_success:
            detail = str(body.get("error") or body.get("detail") or _short(text))
            return BackendResult(False, resp.status_code, detail, body), body
        return BackendResult(ok=True, status=resp.status_code, body=body), body


def _parse_locations(body: dict) -> dict[str, list[str]] | None:
    """Validate a query answer: every value a list of strings."""
    out: dict[str, list[str]] = {}
    for key, value in body.items():
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return None
        out[str(key)] = list(value)
    return out


def _short(text: str) -> str:
    """A one-line excerpt of a non-JSON answer for BackendResult.detail."""
    return " ".join(text.split())[:200] or "empty answer"
