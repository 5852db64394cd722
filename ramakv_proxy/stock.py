"""The proxy on the stock stack: the server's keys and the token prefetch of a restored turn.

With vLLM + ``LMCacheMPConnector`` + lmcache's own multiprocess server (docs/stock-stack.md)
no answer carries chunk hashes, and the server prefetches token sequences, not hashes. So
each named turn is tokenised (the engine's ``/tokenize``) *before* it is forwarded; its
keys (stock_keys, blake3 at the server's chunk_size) are the turn_end's chunk hashes, and
when the lifecycle restores the session, the wait for its chunks is the server's own warm
prefetch of those tokens (``POST /cache/prefetches``, polled until completed or the
restore deadline). Token ids live only while their request is in flight, keyed by session:
nothing is kept per session (50k sessions x 100k tokens would be gigabytes), and the
restored request's own tokens are exactly the prefix it is about to reuse.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import aiohttp

from ramakv_proxy import stock_keys
from ramakv_sdk import prompt_hashes
from ramakv_sdk.lifecycle.landing import Landing, LandingWait

log = logging.getLogger("ramakv_proxy")

HTTP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class StockSettings:
    """The stock server's HTTP URL, and the key fields the engine's connector uses:
    ``model_name`` is vLLM's ``--model`` ("" = the engine's /v1/models ``root``)."""

    url: str
    model_name: str = ""
    world_size: int = 1
    cache_salt: str = ""


class StockStack:
    """Reads the server's chunk size once, tokenises turns, prefetches their tokens."""

    def __init__(self, settings: StockSettings, http: aiohttp.ClientSession, upstream: str):
        self.settings = settings
        self.http = http
        self.upstream = upstream
        self.url = settings.url.rstrip("/")
        self.model_name = settings.model_name
        self.chunk_size: int | None = None
        # session -> (its request's keys, their token ids) while that request is in flight.
        self.in_flight: dict[str, tuple[dict[str, Any], list[list[int]]]] = {}
        self._lock = asyncio.Lock()

    async def ready(self) -> bool:
        """Read the server's chunk_size and hash (and the model name) until they are known;
        False, logged, while the server cannot say or hashes with anything but blake3."""
        if self.chunk_size is not None and self.model_name:
            return True
        async with self._lock:
            try:
                if self.chunk_size is None:
                    config = await self._get_json(self.url + "/config")
                    problem = stock_keys.server_problem(config)
                    if problem is not None:
                        log.error("%s: %s; no turn is reported", self.url, problem)
                        return False
                    size = config["mp"].get("chunk_size") if isinstance(config, dict) else None
                    if not isinstance(size, int) or size <= 0:
                        log.error("%s/config has no mp.chunk_size: %s", self.url, config)
                        return False
                    self.chunk_size = size
                if not self.model_name:
                    models = await self._get_json(self.upstream + "/v1/models")
                    data = models.get("data") if isinstance(models, dict) else None
                    first = data[0] if isinstance(data, list) and data else {}
                    root = first.get("root") if isinstance(first, dict) else None
                    if not isinstance(root, str) or not root:
                        log.error("%s/v1/models names no model root: %s", self.upstream, models)
                        return False
                    self.model_name = root
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
                log.warning("stock server %s not ready: %s", self.url, err)
                return False
        shown = (self.url, self.chunk_size, self.model_name)
        log.info("stock stack %s: chunk_size=%d model=%s", *shown)
        return True

    async def _get_json(self, url: str) -> Any:
        timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
        async with self.http.get(url, timeout=timeout) as r:
            r.raise_for_status()
            return await r.json(content_type=None)

    async def before(
        self, session_id: str, path: str, body: bytes, headers: list[tuple[str, str]]
    ) -> dict[str, Any] | None:
        """Tokenise a named turn before it is forwarded: its ``{"chunk_hashes"}`` (the
        server's keys), its tokens kept for a restore's prefetch; None when unknown."""
        if not await self.ready() or self.chunk_size is None:
            return None
        ids = await prompt_hashes.tokenized_ids(self.http, self.upstream, path, body, headers)
        if ids is None:
            return None
        keys = {"chunk_hashes": stock_keys.hashes_of(ids, self.chunk_size)}
        self.in_flight[session_id] = (keys, ids)  # the keys object names this request
        return keys

    def after(self, session_id: str, keys: dict[str, Any] | None) -> None:
        """The request (whose :meth:`before` gave ``keys``) was handled: its tokens are not
        needed any more; a newer request of the same session keeps its own."""
        entry = self.in_flight.get(session_id)
        if entry is not None and keys is not None and entry[0] is keys:
            del self.in_flight[session_id]

    async def prefetch(self, token_ids: list[int], deadline_s: float) -> tuple[int, int] | None:
        """The server's warm prefetch of ``token_ids`` (L2 -> L1), polled until completed:
        (found_keys, total_keys); (0, 0) for a sub-chunk prompt; None when it failed or
        was still pending at ``deadline_s`` (seconds from now)."""
        payload = {
            "model_name": self.model_name,
            "world_size": self.settings.world_size,
            "token_ids": token_ids,
            "cache_salt": self.settings.cache_salt,
        }
        timeout = aiohttp.ClientTimeout(total=HTTP_TIMEOUT_S)
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        try:
            async with self.http.post(
                self.url + "/cache/prefetches", json=payload, timeout=timeout
            ) as r:
                submitted = await r.json(content_type=None)
                if r.status != 202 or not isinstance(submitted, dict):
                    log.warning("prefetch refused (%s): %s", r.status, submitted)
                    return None
            if submitted.get("status") == "noop":
                return 0, 0
            poll = f"{self.url}/cache/prefetches/{submitted.get('request_id')}"
            while True:
                async with self.http.get(poll, timeout=timeout) as r:
                    state = await r.json(content_type=None)
                if r.status != 200 or not isinstance(state, dict):
                    log.warning("prefetch poll %s answered %s: %s", poll, r.status, state)
                    return None
                if state.get("status") == "completed":
                    return int(state.get("found_keys", 0)), int(state.get("total_keys", 0))
                if loop.time() >= end:
                    return None
                await asyncio.sleep(0.005)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
            log.warning("prefetch from %s failed: %s", self.url, err)
            return None


class StockLanding(LandingWait):
    """A restore's wait on the stock stack: the server's prefetch of the restored
    request's own tokens (the daemon cannot prefetch by hash there, nor say where chunks
    are); a session with no request in flight has nothing to wait for."""

    def __init__(self, stock: StockStack, landing: LandingWait) -> None:
        super().__init__(landing.client, landing.clock, landing.poll_s)
        self.stock = stock

    async def wait(self, session_id: str, deadline: float) -> Landing:
        started = self.clock.now()
        entry = self.stock.in_flight.get(session_id)
        if entry is None or not entry[1]:
            return Landing("unknown")
        prompts = entry[1]
        found = total = 0
        for ids in prompts:
            got = await self.stock.prefetch(ids, max(0.0, deadline - self.clock.now()))
            if got is None:
                return Landing("timeout", total, found, self.clock.now() - started)
            found, total = found + got[0], total + got[1]
        return Landing("landed", total, found, self.clock.now() - started)
