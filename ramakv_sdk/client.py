"""AsyncClient: one method per daemon event, the daemon's errors raised as RamAKvError."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

import aiohttp

from ramakv_sdk import payloads
from ramakv_sdk._closing import AsyncClosing
from ramakv_sdk.config import DEFAULT_DAEMON_URL, load_config
from ramakv_sdk.errors import DaemonUnavailable, RamAKvError
from ramakv_sdk.results import (
    BackendQueryData,
    ChunkEvictData,
    ChunkInfoData,
    Envelope,
    HealthData,
    ListEventsData,
    ListSessionsData,
    SessionCloseData,
    SessionForkData,
    SessionForkEndData,
    SessionMapData,
    SessionSuspendData,
    SnapshotRestoreData,
    TurnEndData,
    TurnStartData,
)
from ramakv_sdk.trace import TraceSubscription


class AsyncClient(AsyncClosing):
    """An async client for one daemon; use it as ``async with AsyncClient(...) as c``.

    Every event method returns the answer's ``data`` as a plain dict (typed with the
    TypedDicts in :mod:`ramakv_sdk.results`) and raises :class:`RamAKvError` with the
    daemon's error text on ``ok: false``, :class:`DaemonUnavailable` when the daemon cannot
    be reached or does not answer within ``timeout`` seconds.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_DAEMON_URL,
        timeout: float = 5.0,
        token: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.token = token or None
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._post_headers = {**self._headers, "Content-Type": "application/json"}
        self._event_url = self.base_url + "/event"
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_config(cls, path: str | None = None, timeout: float = 5.0) -> AsyncClient:
        """A client for the SDK config's daemon_url and auth_token (defaults when absent)."""
        cfg = load_config(path)
        if cfg is None:
            return cls(timeout=timeout)
        return cls(cfg.daemon_url, timeout=timeout, token=cfg.auth_token or None)

    def _http(self) -> aiohttp.ClientSession:
        """One pooled session (created on first use, inside the running loop)."""
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # A session belongs to one loop; a client reused under a new loop (asyncio.run
            # twice, say) starts a new pool rather than failing.
            # aiohttp, not httpx: a fifth of the CPU per event (0.28 vs 1.5 ms measured),
            # which is what a proxy or a host sending from its own loop pays.
            self._session = aiohttp.ClientSession(headers=self._headers)
            self._loop = loop
        return self._session

    # ---- transport
    async def raw(self, event: Mapping[str, Any]) -> Envelope:
        """POST one event; the whole envelope, ok or not.

        Raises:
            DaemonUnavailable: no connection, or no answer within ``timeout``.
            RamAKvError: the answer was not a JSON envelope (e.g. a wrong URL).
        """
        type_ = event.get("type") if isinstance(event.get("type"), str) else None
        payload = json.dumps(dict(event)).encode()
        try:
            async with self._http().post(
                self._event_url, data=payload, headers=self._post_headers, timeout=self._timeout
            ) as resp:
                status = resp.status
                raw = await resp.read()
        except TimeoutError as err:
            raise DaemonUnavailable(
                f"ram-a-kv daemon at {self.base_url} did not answer within {self.timeout}s",
                type_,
            ) from err
        except (aiohttp.ClientError, OSError) as err:
            raise DaemonUnavailable(
                f"cannot reach ram-a-kv daemon at {self.base_url}: {err or type(err).__name__}",
                type_,
            ) from err
        try:
            body = json.loads(raw)
        except ValueError:
            raise RamAKvError(
                f"HTTP {status} from {self._event_url} is not JSON: {raw[:200]!r}",
                type_,
                status,
            ) from None
        if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
            raise RamAKvError(
                f"HTTP {status} from {self._event_url} is not an event answer", type_, status
            )
        return cast(Envelope, body)

    async def send(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """POST one event and return its ``data``; ``ok: false`` raises RamAKvError."""
        env = await self.raw(event)
        if not env["ok"]:
            raise RamAKvError(
                str(env.get("error", "unknown error")), env.get("type") or event.get("type")
            )
        return env.get("data", {})

    # ---- the original's events ----
    async def health(self) -> HealthData:
        """``{"status": "running", "sessions_count": n}``."""
        return cast(HealthData, await self.send({"type": "health"}))

    async def list_events(self) -> ListEventsData:
        """``{"events": {...}, "admin_events": {...}}``: name -> {description, required,
        optional}; ``events`` holds exactly the nine contract events."""
        return cast(ListEventsData, await self.send({"type": "list_events"}))

    async def turn_start(
        self, session_id: str, request_id: str | None = None, prefetch: bool | None = None
    ) -> TurnStartData:
        """Prefetch the session's chunks before inference (``prefetch=False``: mark the turn
        only). ``request_id`` (at most 128 characters) names the request: only the
        turn_end carrying it cancels this prefetch, so overlapping requests of one session
        never cancel each other's."""
        event = payloads.turn_start(session_id, prefetch, request_id)
        return cast(TurnStartData, await self.send(event))

    async def turn_end(
        self,
        session_id: str,
        kv_transfer_params: Mapping[str, Any] | None = None,
        debug_context: Mapping[str, Any] | None = None,
        request_id: str | None = None,
    ) -> TurnEndData:
        """Report a finished turn with the engine's ``kv_transfer_params``, which must carry
        a ``chunk_hashes`` list (``[]`` empties the map); without one MissingChunkHashes
        (a ValueError) is raised and nothing is sent: the daemon would refuse it.
        ``request_id``: the request it ends (its turn_start's), whose prefetches are
        cancelled; without one, the session's oldest request's."""
        event = payloads.turn_end(session_id, kv_transfer_params, debug_context, request_id)
        return cast(TurnEndData, await self.send(event))

    async def snapshot_restore(
        self,
        session_id: str,
        source_session_id: str | None = None,
        request_id: str | None = None,
    ) -> SnapshotRestoreData:
        """Re-reference a stored map and prefetch it; ``source_session_id`` seeds it from
        another session (a resume under a new id), leaving the source as it was;
        ``request_id``: the request the prefetch is for."""
        event = payloads.snapshot_restore(session_id, source_session_id, request_id)
        return cast(SnapshotRestoreData, await self.send(event))

    async def session_map(self, session_id: str) -> SessionMapData:
        event = payloads.session_event("session_map", session_id)
        return cast(SessionMapData, await self.send(event))

    async def session_fork(self, session_id: str) -> SessionForkData:
        """Hold the session's current chunks for a subagent: ``{"forked": true, "fork_id":
        n}``. Keep ``fork_id`` and pass it to :meth:`session_fork_end` when that subagent
        is done (subagents finish in any order)."""
        event = payloads.session_event("session_fork", session_id)
        return cast(SessionForkData, await self.send(event))

    async def session_fork_end(
        self, session_id: str, fork_id: int | None = None
    ) -> SessionForkEndData:
        """Release fork ``fork_id`` (without it, the session's newest open fork).

        ``{"fork_end": true, "fork_id": n}``; ``fork_end`` is false, and nothing changed,
        when ``fork_id`` was already released (a retry) or is unknown.
        """
        event = payloads.session_event("session_fork_end", session_id, fork_id=fork_id)
        return cast(SessionForkEndData, await self.send(event))

    async def session_suspend(self, session_id: str, inferred: bool = False) -> SessionSuspendData:
        """Suspend the session; ``inferred`` says the host guessed the pause (the daemon
        then only orders its chunks cold)."""
        event = payloads.session_event("session_suspend", session_id, inferred=inferred or None)
        return cast(SessionSuspendData, await self.send(event))

    async def session_close(self, session_id: str, inferred: bool = False) -> SessionCloseData:
        """Close the session. Declared (the default): its private chunks are evicted after
        the deferral. ``inferred``: the host guessed the end; nothing is deleted on it,
        its chunks are ordered cold and age out by the retention window."""
        event = payloads.session_event("session_close", session_id, inferred=inferred or None)
        return cast(SessionCloseData, await self.send(event))

    # ---- admin events
    async def list_sessions(
        self,
        state: Literal["active", "suspended", "closed"] | None = None,
        limit: int | None = None,
        offset: int | None = None,
        session_ids: list[str] | None = None,
    ) -> ListSessionsData:
        """``{"total": n, "sessions": [{session_id, state, turn_count, chunk_count,
        shared_count, fork_holds, forks, last_event_ts}]}``; ``total`` counts every match,
        not just this page; a closed session with open forks is listed with state
        ``"closed"``; ``session_ids`` keeps only those sessions."""
        event: dict[str, Any] = {"type": "list_sessions"}
        pairs = (
            ("state", state),
            ("limit", limit),
            ("offset", offset),
            ("session_ids", session_ids),
        )
        for key, value in pairs:
            if value is not None:
                event[key] = value
        return cast(ListSessionsData, await self.send(event))

    async def chunk_info(self, hashes: Iterable[str | int]) -> ChunkInfoData:
        """``{"chunks": {hash: {refcount, holders}}}`` for each hash asked about."""
        return cast(ChunkInfoData, await self.send(payloads.chunk_event("chunk_info", hashes)))

    async def chunk_evict(
        self, hashes: Iterable[str | int], dry_run: bool = False, force: bool = False
    ) -> ChunkEvictData:
        """Evict unreferenced chunks; ``dry_run`` only reports, ``force`` also evicts
        referenced ones (``released`` says which sessions lost which hashes)."""
        event = payloads.chunk_event("chunk_evict", hashes, dry_run=dry_run, force=force)
        return cast(ChunkEvictData, await self.send(event))

    async def backend_query(self, hashes: Iterable[str | int]) -> BackendQueryData:
        """Where the cache backend holds each chunk: ``{backend, ok, locations}``."""
        return cast(
            BackendQueryData, await self.send(payloads.chunk_event("backend_query", hashes))
        )

    # ---- trace
    def subscribe_trace(
        self,
        since: int | None = None,
        session: str | None = None,
        *,
        max_backoff: float = 5.0,
        history: int = 0,
    ) -> TraceSubscription:
        """An async iterator over the trace websocket (protocol 2) that reconnects by itself.

        Yields the daemon's messages (``snapshot``, ``snapshot_sessions`` and ``event``
        dicts; docs/trace.md) plus two markers of ours: ``{"kind": "disconnected", ...}``
        once per outage and ``{"kind": "reconnected", "since": n, ...}`` when it is back
        (see docs/sdk.md). ``history=N`` asks for up to N recent records before a fresh
        snapshot. Uses this client's token.
        """
        return TraceSubscription(
            self._http,
            self.base_url,
            since=since,
            session=session,
            max_backoff=max_backoff,
            history=history,
        )

    # ---- life cycle
    async def aclose(self) -> None:
        """Close the connection pool (and with it any trace websocket)."""
        if self._session is not None:
            if self._loop is asyncio.get_running_loop():
                await self._session.close()
            self._session = None
