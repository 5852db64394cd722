"""The fire-and-forget global client: init once, then calls that never block nor raise."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ramakv_sdk import payloads
from ramakv_sdk.client import AsyncClient
from ramakv_sdk.config import config_path, load_config
from ramakv_sdk.sender import EventSender, RateLimitedLog, SenderStats

log = logging.getLogger("ramakv_sdk")


class BackgroundClient:
    """A sender thread with its own event loop; ``emit`` may be called from any thread.

    ``emit`` appends to an in-memory inbox and wakes the loop only when it is not already
    awake, so a call costs about a microsecond and never touches the network.
    """

    def __init__(
        self,
        daemon_url: str,
        token: str | None = None,
        timeout: float = 2.0,
        max_queue: int = 10000,
        concurrency: int = 8,
        retry_for: float = 5.0,
    ) -> None:
        self.daemon_url = daemon_url
        self.retry_for = retry_for
        self.token = token
        self.timeout = timeout
        self.max_queue = max_queue
        self.concurrency = concurrency
        self.stats = SenderStats()
        self._log = RateLimitedLog()
        self._inbox: deque[dict[str, Any]] = deque()
        self._wake_pending = False
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._sender: EventSender | None = None
        _LIVE.add(self)

    # ---- caller side (any thread) ----
    def emit(self, event: dict[str, Any]) -> None:
        """Queue one event for the sender thread; drops (counted) when the queue is full."""
        try:
            if len(self._inbox) >= self.max_queue:
                self.stats.dropped_full += 1
                self._log.warn(
                    "full", "ram-a-kv SDK queue full (%d events); event dropped", self.max_queue
                )
                return
            self._inbox.append(event)
            if not self._wake_pending:
                self._wake_pending = True
                loop = self._loop or self._start()
                loop.call_soon_threadsafe(self._move_inbox)
        except Exception:  # a closed loop at interpreter exit, say: never raise into a host
            self._wake_pending = False
            self.stats.dropped_unavailable += 1

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until every event emitted so far was sent or dropped; False on timeout."""
        loop = self._loop
        if loop is None:
            return not self._inbox
        if threading.current_thread() is self._thread:
            return False
        fut = asyncio.run_coroutine_threadsafe(self._flush(timeout), loop)
        try:
            return fut.result(timeout + 1.0)
        except Exception:
            return False

    def close(self, timeout: float = 5.0) -> None:
        """Flush, then stop the sender thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self.flush(timeout)
        sender = self._sender
        if sender is not None:
            asyncio.run_coroutine_threadsafe(sender.aclose(0), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        self._loop = self._thread = self._sender = None

    # ---- sender side (its own thread) ----
    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                client = AsyncClient(self.daemon_url, timeout=self.timeout, token=self.token)
                self._sender = EventSender(
                    client,
                    self.max_queue,
                    self.concurrency,
                    retry_for=self.retry_for,
                    stats=self.stats,
                )
                ready.set()
                loop.run_forever()

            thread = threading.Thread(target=run, name="ramakv-sdk-sender", daemon=True)
            thread.start()
            ready.wait()
            self._thread = thread
            self._loop = loop
            return loop

    def _move_inbox(self) -> None:
        # Clear the flag before draining: an event appended after this line either is
        # drained below or schedules another wake-up itself.
        self._wake_pending = False
        sender = self._sender
        assert sender is not None
        inbox = self._inbox
        while inbox:
            sender.submit(inbox.popleft())

    async def _flush(self, timeout: float) -> bool:
        self._move_inbox()
        assert self._sender is not None
        return await self._sender.flush(timeout)

    def _forget_thread(self) -> None:
        """After fork: the child has no sender thread; start a new one on the next emit."""
        self._loop = self._thread = self._sender = None
        self._lock = threading.Lock()
        self._wake_pending = False
        self._inbox.clear()


_LIVE: weakref.WeakSet[BackgroundClient] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for client in list(_LIVE):
        client._forget_thread()


os.register_at_fork(after_in_child=_after_fork_in_child)


# ---- the module-level API, as the original SDK ----
_client: BackgroundClient | None = None
_initialised = False
_init_lock = threading.Lock()


def init(daemon_url: str, auth_token: str | None = None, **options: Any) -> None:
    """Enable the global client for ``daemon_url``; only the first init of a process counts.

    ``options`` go to :class:`BackgroundClient` (timeout, max_queue, concurrency,
    retry_for).
    """
    global _client, _initialised
    with _init_lock:
        if _initialised:
            log.warning("ram-a-kv SDK already initialised; this init is ignored")
            return
        _initialised = True
        _client = BackgroundClient(daemon_url.rstrip("/"), auth_token or None, **options)
        atexit.register(_client.flush, 2.0)
        log.info("ram-a-kv SDK enabled, daemon %s", _client.daemon_url)


def init_from_path(path: str | os.PathLike[str]) -> None:
    """Read ``daemon_url`` (and ``auth_token``) from a TOML file; missing or broken file
    leaves the SDK disabled (every call a no-op). Only the first init counts."""
    global _initialised
    cfg = load_config(path)
    if cfg is None:
        with _init_lock:
            if _initialised:
                log.warning("ram-a-kv SDK already initialised; this init is ignored")
                return
            _initialised = True
        log.info("ram-a-kv SDK disabled: no usable config at %s", Path(path))
        return
    init(cfg.daemon_url, cfg.auth_token or None)


def init_from_config() -> None:
    """:func:`init_from_path` on ``$XDG_CONFIG_HOME/ram-a-kv/config.toml`` (~/.config)."""
    init_from_path(config_path())


def is_enabled() -> bool:
    """True once an init found a usable config."""
    return _client is not None


def _emit(event: dict[str, Any]) -> None:
    client = _client
    if client is not None:
        client.emit(event)


def turn_start(session_id: str, request_id: str | None = None) -> None:
    """``request_id``: the request it begins; the turn_end naming it cancels its prefetch."""
    _emit(payloads.turn_start(session_id, request_id=request_id))


def turn_end(
    session_id: str,
    kv_transfer_params: Mapping[str, Any] | None = None,
    debug_context: Mapping[str, Any] | None = None,
    request_id: str | None = None,
) -> None:
    """Report a turn; ``kv_transfer_params`` must carry a ``chunk_hashes`` list (``[]``
    empties the map). Without one the turn_end is dropped (counted as failed, logged): the
    daemon would refuse it."""
    client = _client
    if client is None:
        return
    try:
        event = payloads.turn_end(session_id, kv_transfer_params, debug_context, request_id)
    except payloads.MissingChunkHashes:
        client.stats.failed += 1
        log.warning(
            "ram-a-kv turn_end for %r dropped: no kv_transfer_params.chunk_hashes", session_id
        )
        return
    except Exception:  # malformed params: drop, never raise into the host
        client.stats.failed += 1
        log.warning("ram-a-kv turn_end for %r dropped: malformed kv_transfer_params", session_id)
        return
    client.emit(event)


def snapshot_restore(
    session_id: str, source_session_id: str | None = None, request_id: str | None = None
) -> None:
    _emit(payloads.snapshot_restore(session_id, source_session_id, request_id))


def session_fork(session_id: str) -> None:
    """Fire-and-forget: the fork_id is not returned (use :class:`ramakv_sdk.AsyncClient` to get
    it); a later :func:`session_fork_end` without an id ends the newest open fork."""
    _emit({"type": "session_fork", "session_id": session_id})


def session_fork_end(session_id: str, fork_id: int | None = None) -> None:
    """End fork ``fork_id`` (as returned by AsyncClient.session_fork), else the newest."""
    _emit(payloads.session_event("session_fork_end", session_id, fork_id=fork_id))


def session_suspend(session_id: str, inferred: bool = False) -> None:
    """``inferred``: the host guessed the pause (AsyncClient.session_suspend)."""
    _emit(payloads.session_event("session_suspend", session_id, inferred=inferred or None))


def session_close(session_id: str, inferred: bool = False) -> None:
    """Declared by default; ``inferred`` never deletes (AsyncClient.session_close)."""
    _emit(payloads.session_event("session_close", session_id, inferred=inferred or None))


def flush(timeout: float = 5.0) -> bool:
    """Block until everything emitted so far was sent or dropped (True), or ``timeout``."""
    client = _client
    return client.flush(timeout) if client is not None else True


def stats() -> dict[str, int]:
    """Counters: sent, failed, dropped_unavailable, dropped_full, dropped."""
    client = _client
    return client.stats.as_dict() if client is not None else SenderStats().as_dict()


def _reset_for_tests() -> None:
    """Stop the global client and forget the init (tests only)."""
    global _client, _initialised
    with _init_lock:
        if _client is not None:
            atexit.unregister(_client.flush)
            _client.close(2.0)
        _client = None
        _initialised = False
