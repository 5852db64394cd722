"""lmcache async lookup client that remembers each lookup's chunk hashes for request_finished."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import torch
import zmq
from lmcache.logging import init_logger
from lmcache.v1.lookup_client.async_lookup_message import (
    LookupCleanupMsg,
    LookupRequestMsg,
    LookupResponseMsg,
)
from lmcache.v1.lookup_client.lmcache_async_lookup_client import LMCacheAsyncLookupClient
from lmcache.v1.rpc_utils import get_zmq_rpc_path_lmcache, get_zmq_socket

from ascend_ext.hash_cache import DEFAULT_MAX_ENTRIES, DEFAULT_TTL_S, HashCache
from ascend_ext.hashing import to_hex

logger = init_logger(__name__)

#: How long close() waits for a ZMQ receive thread to leave recv() before giving up on it.
STOP_TIMEOUT_S = 10.0

#: lmcache ``extra_config`` keys that size the hash cache.
MAX_ENTRIES_KEY = "ramakv.hash_cache_max_entries"
TTL_KEY = "ramakv.hash_cache_ttl_s"


def unwrap_lookup_client(client: Any) -> Any:
    """Follow the decorator chain (HitLimit-, ChunkStatisticsLookupClient...) to the core client."""
    seen: set[int] = set()
    while hasattr(client, "actual_lookup_client") and id(client) not in seen:
        seen.add(id(client))
        client = client.actual_lookup_client
    return client


class RamAKVAsyncLookupClient(LMCacheAsyncLookupClient):
    """Caches the hex hashes computed in lookup(); request_finished pops them."""

    _hash_cache: HashCache

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A second instance would bind the scheduler's ZMQ PULL socket again and start a
        # second response thread; only upgrading the instance lmcache built is safe.
        raise TypeError(
            "RamAKVAsyncLookupClient cannot be constructed; use "
            "RamAKVAsyncLookupClient.from_existing(client)"
        )

    @classmethod
    def from_existing(cls, client: Any, metadata: Any = None) -> RamAKVAsyncLookupClient:
        """Upgrade the async client inside ``client``'s decorator chain in place and return it.

        ``metadata`` (the LMCacheMetadata it was built with) lets close() wake its
        response thread; without it close() behaves as lmcache's.
        """
        inner = unwrap_lookup_client(client)
        if isinstance(inner, cls):
            if getattr(inner, "_scheduler_path", None) is None:
                inner._scheduler_path = _scheduler_socket_path(metadata)
            return inner
        if not isinstance(inner, LMCacheAsyncLookupClient):
            raise TypeError(f"not an LMCacheAsyncLookupClient: {type(inner).__name__}")
        # Swapping __class__ keeps the sockets, the lock and the running response thread.
        inner.__class__ = cls
        inner._init_hash_cache()
        inner._scheduler_path = _scheduler_socket_path(metadata)
        return inner

    def _init_hash_cache(self) -> None:
        extra = getattr(self.config, "extra_config", None) or {}
        self._hash_cache = HashCache(
            max_entries=int(extra.get(MAX_ENTRIES_KEY, DEFAULT_MAX_ENTRIES)),
            ttl_s=float(extra.get(TTL_KEY, DEFAULT_TTL_S)),
        )

    @property
    def hash_cache(self) -> HashCache:
        """The bounded store behind get_cached_hashes()."""
        return self._hash_cache

    def lookup(
        self,
        token_ids: torch.Tensor | list[int],
        lookup_id: str,
        request_configs: dict | None = None,
    ) -> int | None:
        """lmcache 0.5.6's lookup(), keeping the hashes it computes (hashing once, not twice)."""
        hashes: list[int] = []
        offsets: list[int] = []
        for start, end, hash_val in self.token_database.process_tokens(token_ids, make_key=False):
            hashes.append(hash_val)
            offsets.append(end - start)

        self._hash_cache.put(lookup_id, [to_hex(h) for h in hashes])

        msg = LookupRequestMsg(
            lookup_id=lookup_id,
            hashes=hashes,
            offsets=offsets,
            request_configs=request_configs,
        )
        msg_buf = msgspec.msgpack.encode(msg)
        for i in range(self.world_size):
            self.push_sockets[i].send(msg_buf, copy=False)
        time.sleep(self.lookup_backoff_time)
        return None

    def get_cached_hashes(self, lookup_id: str) -> list[str] | None:
        """Pop the hex hashes of a lookup (None if never looked up, expired or already taken)."""
        return self._hash_cache.pop(lookup_id)

    # clear_lookup_status is inherited unchanged on purpose: vLLM calls it from
    # update_state_after_alloc, before request_finished, so it must not drop hashes.

    def close(self) -> None:
        """Forget every cached hash, stop the response thread, then close the sockets.

        lmcache's close() joins the response thread for 1 s while it sits in recv(), then
        closes the socket under it (libzmq sockets are not thread-safe: that can abort the
        process), and terminates the process-wide ``zmq.Context.instance()``, which blocks
        for ever while any other socket of that shared context is open. Here one message to
        our own PULL socket lets the thread see ``running = False`` and leave recv() first;
        a thread that still does not stop keeps its socket (a leak, not a crash); and a
        shared context is left alive for the next user.
        """
        self._hash_cache.clear()
        self.running = False
        path = getattr(self, "_scheduler_path", None)
        if path is not None and self.thread.is_alive():
            _poke(self.ctx, path, LookupResponseMsg(lookup_id=_WAKE_ID, num_hit_tokens=0))
        self.thread.join(timeout=STOP_TIMEOUT_S)
        if self.thread.is_alive():
            logger.error(
                "lookup client thread did not stop within %.0f s; leaving its sockets open",
                STOP_TIMEOUT_S,
            )
            return
        for s in self.push_sockets:
            s.close(linger=0)
        self.pull_socket.close(linger=0)
        if self.ctx is not getattr(zmq.Context, "_instance", None):
            self.ctx.term()
        with self.lock:
            self.res_for_each_worker.pop(_WAKE_ID, None)


_WAKE_ID = "__ramakv_close__"


def _scheduler_socket_path(metadata: Any) -> str | None:
    """The ipc path the client's PULL socket is bound to, as lmcache computes it."""
    if metadata is None or getattr(metadata, "engine_id", None) is None:
        return None
    extra = metadata.kv_connector_extra_config or {}
    return get_zmq_rpc_path_lmcache(
        metadata.engine_id, "lookup_scheduler", extra.get("lmcache_rpc_port", 0), 0
    )


def _poke(ctx: Any, path: str, msg: Any) -> None:
    """Send one message to an ipc PULL socket from a short-lived PUSH socket."""
    sock = get_zmq_socket(ctx, path, "ipc", zmq.PUSH, "connect")
    try:
        sock.send(msgspec.msgpack.encode(msg))
    finally:
        sock.close(linger=1000)


def wake_lookup_server(server: Any, metadata: Any, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Make an LMCacheAsyncLookupServer's receive thread leave recv() and exit; True if it did.

    The thread checks ``running`` after each message, so one message to its own PULL
    socket is enough even with a backlog of lookups queued behind it.
    """
    server.running = False
    if not server.thread.is_alive():
        return True
    extra = metadata.kv_connector_extra_config or {}
    path = get_zmq_rpc_path_lmcache(
        metadata.engine_id, "lookup_worker", extra.get("lmcache_rpc_port", 0), metadata.worker_id
    )
    _poke(server.ctx, path, LookupCleanupMsg(lookup_id=_WAKE_ID))
    server.thread.join(timeout=timeout)
    return not server.thread.is_alive()


def shutdown_engine_and_lookup_server(
    instance_id: str, server: Any | None, metadata: Any, timeout: float = STOP_TIMEOUT_S
) -> bool:
    """Destroy an LMCacheEngine built with an async lookup server, in an order libzmq survives.

    Two threads use the server's sockets: its receive thread (``pull_socket``) and the
    engine's storage-manager event loop, which answers finished lookups through
    ``server.push_socket``. ``server.close()`` closes both sockets from the caller's thread
    while they may still be in use (lookups in flight at shutdown), which can abort the
    process inside libzmq. So: stop the receive thread, destroy the engine (which stops and
    joins the event loop), and close the sockets only once neither thread is alive.
    Returns True when everything was closed; False when a thread would not stop and the
    sockets were left open rather than closed under it.
    """
    from lmcache.v1.cache_engine import LMCacheEngineBuilder

    receiver_stopped = True if server is None else wake_lookup_server(server, metadata, timeout)
    engine = LMCacheEngineBuilder._instances.get(instance_id)
    LMCacheEngineBuilder.destroy(instance_id)
    sm = getattr(engine, "storage_manager", None)
    loop_thread = getattr(sm, "thread", None)
    if loop_thread is not None and loop_thread.is_alive():
        loop_thread.join(timeout=timeout)
    loop_stopped = loop_thread is None or not loop_thread.is_alive()
    if server is None:
        return loop_stopped
    if not (receiver_stopped and loop_stopped):
        logger.error(
            "lookup server of %s: a thread did not stop (receiver=%s, event loop=%s); "
            "leaving its sockets open",
            instance_id,
            receiver_stopped,
            loop_stopped,
        )
        return False
    if not server.ctx.closed:  # idempotent
        server.push_socket.close(linger=0)
        server.pull_socket.close(linger=0)
        server.ctx.term()
    return True
