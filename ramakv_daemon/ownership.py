"""Session ownership across nodes on a shared store: take over on an event, release on a
takeover by another node (docs/scale-out.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ramakv_daemon.namespaces import Namespaces

log = logging.getLogger("ramakv.ownership")

# Events that act on a session another node may own: they take it over first. Reads
# (session_map, list_sessions) answer from this node's memory and never move a session.
TAKING_EVENTS = frozenset(
    {
        "turn_start",
        "turn_end",
        "snapshot_restore",
        "session_suspend",
        "session_close",
        "session_fork",
    }
)

Handle = Callable[[dict[str, Any], None], Awaitable[tuple[int, dict[str, Any]]]]


class Ownership:
    """This node's side of the handover protocol; a no-op on a store without owners.

    Takeover: an event for a session not in memory claims it in the database (row lock;
    the store notifies the old owner at commit) and adopts its map before the event
    applies, so turn_start prefetches it. Release: told by the store that another node
    took a session, this node closes it as a session_close would (its chunks drop here and
    are evicted or demoted), without deleting the row (the store deletes only owned rows).
    """

    def __init__(self, store: object, namespaces: Namespaces, handle: Handle) -> None:
        self.store = store
        self.namespaces = namespaces
        self.handle = handle
        self.shared = hasattr(store, "claim")
        self.takeovers = 0
        self.releases = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._releasing: set[str] = set()
        if self.shared:
            store.on_release(self._released)  # type: ignore[attr-defined]
            store.held_sessions(self._held)  # type: ignore[attr-defined]

    def _held(self) -> list[str]:
        return [sid for m in self.namespaces.managers.values() for sid in m.sessions]

    async def fork_id(self, type_: str) -> int | None:
        """On a shared store, a session_fork's id from the store (unique across daemons);
        None where this daemon's own counter is the only one (StoreError: nothing done)."""
        if not self.shared or type_ != "session_fork":
            return None
        return int(await self.store.take_fork_id())  # type: ignore[attr-defined]

    async def before(self, type_: str, session_id: str | None) -> None:
        """Take ``session_id`` over when another node owns it (StoreError: nothing done)."""
        if not self.shared or not session_id or type_ not in TAKING_EVENTS:
            return
        if self.namespaces.owner(session_id) is not None:
            return
        claimed = await self.store.claim(session_id)  # type: ignore[attr-defined]
        if claimed is None:
            return
        session = claimed.session
        if self.namespaces.owner(session_id) is not None:  # an event adopted it meanwhile
            return
        self.namespaces.add(session.namespace).manager.adopt(session)
        self.takeovers += 1
        log.info(
            "took over session %r from node %r (%d chunks)",
            session_id,
            claimed.previous_owner,
            len(session.unique_hashes()),
        )

    def _released(self, session_id: str, new_owner: str) -> None:
        task = asyncio.get_running_loop().create_task(self._release(session_id, new_owner))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release(self, session_id: str, new_owner: str) -> None:
        key = self.namespaces.owner(session_id)
        if key is None or session_id not in self.namespaces[key].manager.sessions:
            return
        if session_id in self._releasing:
            return
        self._releasing.add(session_id)
        try:
            payload = {"type": "session_close", "session_id": session_id, "namespace": key}
            status, body = await self.handle(payload, None)
        finally:
            self._releasing.discard(session_id)
        if status == 200 and body.get("ok"):
            self.releases += 1
            log.info(
                "released session %r: node %r took it over (%s chunks evicted)",
                session_id,
                new_owner,
                body.get("data", {}).get("evicted_count"),
            )
        else:
            log.warning(
                "releasing session %r taken by node %r failed: %s",
                session_id,
                new_owner,
                body.get("error"),
            )

    def status(self) -> dict[str, object]:
        """For /metrics: whether the store is reachable, and the handover counters."""
        if not self.shared:  # an embedded store is there while the daemon is
            return {"connected": True, "reconnects": 0, "takeovers": 0, "releases": 0}
        listener = getattr(self.store, "listener", None)
        return {
            "connected": bool(getattr(self.store, "connected", True)),
            "reconnects": getattr(listener, "reconnects", 0) if listener else 0,
            "takeovers": self.takeovers,
            "releases": self.releases,
        }

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._tasks.clear()
