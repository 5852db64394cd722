"""What the framework hooks send the daemon: suspend, restore (waiting, bounded, for the
chunks to be back in DDR) and close, decided by the lifecycle machine the proxy drives too
(:mod:`ramakv_sdk.lifecycle.machine`, its ``HOST_*`` signals); never raising into the agent."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from ramakv_sdk.client import AsyncClient
from ramakv_sdk.errors import RamAKvError
from ramakv_sdk.lifecycle.clock import Clock, LoopClock
from ramakv_sdk.lifecycle.landing import Landing, LandingWait
from ramakv_sdk.lifecycle.machine import (
    Forget,
    IllegalStep,
    Policy,
    Restore,
    Send,
    SessionMachine,
    Signal,
    State,
)

log = logging.getLogger("ramakv_sdk.hooks")

#: The header ramakv-proxy names sessions by first (vLLM's own session header).
SESSION_HEADER = "X-Session-ID"
#: Which tools are slow enough to suspend for: names, or a predicate on the tool's name.
ToolFilter = Collection[str] | Callable[[str], bool] | None
#: What a run's end does to its session: keep it (the conversation goes on) or close it.
ON_END = ("keep", "close")
#: The hooks set no deadlines: the framework says when a tool starts and ends.
HOOK_POLICY = Policy(tool_pause_s=0, run_end_s=0, idle_s=0, close_on_disconnect=False)


def is_slow(tools: ToolFilter, name: str) -> bool:
    """True when ``name`` is one of the slow tools."""
    if tools is None:
        return False
    if callable(tools):
        return bool(tools(name))
    return name in tools


class SessionSignals:
    """Sends lifecycle events for sessions; remembers which ones it suspended.

    ``client`` defaults to the SDK config's daemon (``AsyncClient.from_config()``).
    ``restore_wait_ms`` bounds the wait, after a restore, for the chunks to be in DDR.
    """

    def __init__(
        self,
        client: AsyncClient | None = None,
        *,
        restore_wait_ms: int = 1000,
        poll_ms: int = 10,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._owns_client = client is None
        self.restore_wait_ms = restore_wait_ms
        self.poll_ms = poll_ms
        self.clock = clock or LoopClock()
        self._machines: dict[str, SessionMachine] = {}
        self.sent: list[tuple[str, str, str]] = []  # (type, session, reason), for inspection

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            self._client = AsyncClient.from_config()
        return self._client

    @property
    def suspended(self) -> set[str]:
        """The sessions this object suspended (their next tool end restores them)."""
        return {sid for sid, m in self._machines.items() if m.state is State.SUSPENDED}

    def _step(self, session_id: str, signal: Signal) -> list[Any] | None:
        """The machine's commands for ``signal``; None when its state does not allow it."""
        m = self._machines.setdefault(session_id, SessionMachine())
        try:
            commands: list[Any] = m.step(signal, self.clock.now(), HOOK_POLICY)
        except IllegalStep:
            return None
        if any(isinstance(c, Forget) for c in commands) or m.state is State.IDLE:
            self._machines.pop(session_id, None)
        return commands

    async def _send(
        self, type_: str, session_id: str, reason: str, inferred: bool = False
    ) -> dict[str, Any] | None:
        event: dict[str, Any] = {"type": type_, "session_id": session_id, "reason": reason}
        if inferred:
            event["inferred"] = True
        try:
            env = await self.client.raw(event)
        except RamAKvError as err:
            log.warning("ram-a-kv %s for session %s not sent: %s", type_, session_id, err)
            return None
        if not env.get("ok"):
            log.warning(
                "ram-a-kv %s for session %s failed: %s", type_, session_id, env.get("error")
            )
            return None
        self.sent.append((type_, session_id, reason))
        log.info("ram-a-kv %s session %s (%s)", type_, session_id, reason)
        data = env.get("data")
        return data if isinstance(data, dict) else {}

    async def suspend(self, session_id: str, reason: str = "slow_tool") -> bool:
        """Suspend the session (its chunks leave DDR while the tool runs); True when it is
        suspended (already, by this object, or now)."""
        commands = self._step(session_id, Signal.HOST_SUSPEND)
        if commands is None:
            return session_id in self.suspended
        for c in commands:
            if isinstance(c, Send):
                data = await self._send(c.type, session_id, reason, c.inferred)
                if data is None or not data.get("suspended"):
                    self._machines.pop(session_id, None)  # not suspended: nothing to restore
                    return False
        return True

    async def restore(self, session_id: str, reason: str = "tool_done") -> Landing | None:
        """Restore a session this object suspended, and wait (bounded) for its chunks;
        None when it had not suspended it."""
        if session_id not in self.suspended:
            return None
        commands = self._step(session_id, Signal.HOST_RESTORE) or []
        if not any(isinstance(c, Restore) for c in commands):
            return None
        deadline = self.clock.now() + self.restore_wait_ms / 1000
        data = await self._send("snapshot_restore", session_id, reason)
        if not data or not data.get("prefetch_count") or not self.restore_wait_ms:
            return Landing("unknown")
        wait = LandingWait(self.client, self.clock, self.poll_ms / 1000)
        return await wait.wait(session_id, deadline)

    async def close(self, session_id: str, reason: str = "run_end") -> bool:
        """Close the session: a declared close (the host knows the run ended), so chunks
        nothing else holds are evicted as the daemon's contract says."""
        commands = self._step(session_id, Signal.HOST_CLOSE) or []
        closed = False
        for c in commands:
            if isinstance(c, Send):
                data = await self._send(c.type, session_id, reason, c.inferred)
                closed = bool(data and data.get("closed"))
        return closed

    async def aclose(self) -> None:
        """Close the client if this object made it."""
        if self._client is not None and self._owns_client:
            await self._client.aclose()
