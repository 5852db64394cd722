"""request_finished's chunk_hashes: from the lookup cache, else recomputed over the prompt."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from ascend_ext import hash_metrics as metrics
from ascend_ext.hashing import to_hex
from ascend_ext.patch_mark import is_patched, mark_patched

log = logging.getLogger("ascend_ext.connector")

RequestFinished = Callable[[Any, Any, list[int]], tuple[bool, dict[str, Any] | None]]


def _unwrap(client: Any) -> Any:
    """Walk lmcache's lookup-client decorators (actual_lookup_client) to the core client."""
    seen: set[int] = set()
    while hasattr(client, "actual_lookup_client") and id(client) not in seen:
        seen.add(id(client))
        client = client.actual_lookup_client
    return client


def _tokens(seq: Any) -> list[int]:
    """A token sequence as a plain list ([] for None)."""
    if seq is None:
        return []
    if hasattr(seq, "tolist"):
        return list(seq.tolist())
    return list(seq)


def prompt_chunk_hashes(lookup_client: Any, token_db: Any, request: Any) -> list[str] | None:
    """Hex chunk hashes of ``request``'s prompt (``[]`` under one chunk); None only when
    there is no token database to hash with.

    The lookup cache is popped first whatever happens, so a request never leaves an entry
    behind; recomputing with ``token_db`` is the fallback for a cache miss (sync lookup
    client, expired entry, lookup skipped).
    """
    cached = None
    inner = _unwrap(lookup_client) if lookup_client is not None else None
    getter = getattr(inner, "get_cached_hashes", None)
    if getter is not None:
        cached = getter(request.request_id)

    prompt = _tokens(getattr(request, "prompt_token_ids", None)) or _tokens(
        getattr(request, "all_token_ids", None)
    )
    if not prompt:
        metrics.REQUEST_FINISHED.labels(source="none").inc()
        return []
    if cached:
        metrics.REQUEST_FINISHED.labels(source="cache").inc()
        return cached
    if token_db is None:
        metrics.REQUEST_FINISHED.labels(source="none").inc()
        return None
    hashes = [to_hex(h) for _, _, h in token_db.process_tokens(tokens=prompt, make_key=False)]
    metrics.REQUEST_FINISHED.labels(source="recompute" if hashes else "none").inc()
    return hashes


def add_chunk_hashes(
    lookup_client: Any, token_db: Any, request: Any, params: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Return ``params`` with ``chunk_hashes`` added: ``[]`` for a prompt under one chunk
    (the host then knows the map is empty); left out only when hashing failed or had no
    token database, which the host must see as an engine fault, never as an empty map."""
    try:
        hashes = prompt_chunk_hashes(lookup_client, token_db, request)
    except Exception:  # noqa: BLE001 - a hashing bug must never fail the user's request
        log.exception("chunk_hashes for request %s failed", getattr(request, "request_id", "?"))
        return params
    if hashes is None:
        return params
    params = dict(params) if params else {}
    params["chunk_hashes"] = hashes
    return params


def token_database_of(impl: Any) -> Any:
    """The token database a connector impl hashes with: the engine's, else the lookup client's."""
    engine = getattr(impl, "lmcache_engine", None)
    db = getattr(engine, "token_database", None)
    if db is not None:
        return db
    client = getattr(impl, "lookup_client", None)
    return getattr(_unwrap(client), "token_database", None) if client is not None else None


def wrap_request_finished(orig: RequestFinished) -> RequestFinished:
    """Wrap a connector impl's request_finished so its result carries chunk_hashes."""
    if is_patched(orig):
        return orig

    @functools.wraps(orig)
    def request_finished(self: Any, request: Any, block_ids: list[int]) -> Any:
        delay_free, params = orig(self, request, block_ids)
        client = getattr(self, "lookup_client", None)
        _maybe_upgrade(client)
        params = add_chunk_hashes(client, token_database_of(self), request, params)
        return delay_free, params

    mark_patched(request_finished)
    return request_finished


def _maybe_upgrade(client: Any) -> None:
    """Upgrade an async lookup client built before install() ran (later requests hit the cache)."""
    if client is None or hasattr(_unwrap(client), "get_cached_hashes"):
        return
    try:
        from lmcache.v1.lookup_client.lmcache_async_lookup_client import (
            LMCacheAsyncLookupClient,
        )

        from ascend_ext.lookup_client import RamAKVAsyncLookupClient
    except ImportError:
        return
    if isinstance(_unwrap(client), LMCacheAsyncLookupClient):
        RamAKVAsyncLookupClient.from_existing(client)
