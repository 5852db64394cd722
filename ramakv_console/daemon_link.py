"""The console's one door to the daemon, over ramakv_sdk (never ramakv_daemon)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from ramakv_console.state import STATUS
from ramakv_protocol.dispatch import TraceReader
from ramakv_protocol.records import (
    DisconnectedMarker,
    EventRecord,
    ReconnectedMarker,
    SnapshotHeader,
    SnapshotPart,
)
from ramakv_sdk.client import AsyncClient
from ramakv_sdk.config import daemon_url, load_config
from ramakv_sdk.errors import (
    DaemonUnavailable,
    RamAKvError,
    TraceProtocolMismatch,
    TraceUnauthorized,
)

HISTORY = 500  # recent records asked for with a fresh snapshot (the logs start filled)
REFUSED_RETRY_S = 30.0  # a refused token or protocol: retried slowly (it may be fixed)


class LinkDown(Exception):
    """The daemon could not be reached."""


class DaemonLink(Protocol):
    """What the console needs: send an event, follow the trace, close."""

    url: str

    async def send(self, event: dict[str, Any]) -> dict[str, Any]:
        """POST one event; the whole envelope ({ok, type, data|error}); LinkDown if unreachable."""
        ...

    def trace(self) -> AsyncIterator[dict[str, Any]]:
        """Trace records forever, with {"kind": "_status", "connected": ...} markers."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def default_url() -> str:
    """The SDK config's daemon_url, else http://127.0.0.1:6998."""
    return daemon_url()


def token_for(url: str, sdk_config: Path | None = None) -> str | None:
    """The SDK config's auth_token, when that config names this daemon_url (as `ramakv`)."""
    cfg = load_config(sdk_config)
    if cfg is None or not cfg.auth_token:
        return None
    return cfg.auth_token if cfg.daemon_url == url.rstrip("/") else None


def status(connected: bool, detail: str, error: str = "") -> dict[str, Any]:
    """A connection marker; ``error`` says what kind of failure (see ConnectionBanner)."""
    return {"kind": STATUS, "connected": connected, "detail": detail, "error": error}


class LinkReader(TraceReader[list[dict[str, Any]]]):
    """What the console gets for each message of the SDK's subscription: the state records
    as they are, its markers as ``_status`` records (one ``connected`` before the first
    record after an outage); the daemon's notices (backend, budget, ...) are not shown."""

    def __init__(self) -> None:
        self.connected = False

    def _up(self) -> list[dict[str, Any]]:
        if self.connected:
            return []
        self.connected = True
        return [status(True, "connected")]

    def _state(self, msg: SnapshotHeader | SnapshotPart | EventRecord) -> list[dict[str, Any]]:
        return [*self._up(), dict(msg)]

    on_snapshot = on_snapshot_sessions = on_event = _state

    def on_disconnected(self, msg: DisconnectedMarker) -> list[dict[str, Any]]:
        self.connected = False
        code, why = msg["code"], msg["reason"] or "connection lost"
        detail = f"{why} (code {code})" if code else why
        return [status(False, detail, msg["error"] or "unreachable")]

    def on_reconnected(self, msg: ReconnectedMarker) -> list[dict[str, Any]]:
        self.connected = False
        return self._up()

    def other(self, msg: Mapping[str, object]) -> list[dict[str, Any]]:
        return self._up()


class SdkLink:
    """DaemonLink over ramakv_sdk.client.AsyncClient."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 5.0) -> None:
        self.url = url
        self.client = AsyncClient(url, timeout=timeout, token=token)

    async def send(self, event: dict[str, Any]) -> dict[str, Any]:
        try:
            return dict(await self.client.raw(event))
        except DaemonUnavailable as err:
            raise LinkDown(str(err)) from err
        except RamAKvError as err:  # not an envelope (wrong URL, 401 ...): show it as one
            return {"ok": False, "type": event.get("type"), "error": str(err)}

    async def trace(self) -> AsyncIterator[dict[str, Any]]:
        """The SDK's subscription; its markers become ``_status`` records.

        The subscription resumes by itself (ramakv_protocol.resume): the same daemon run
        replays what was missed, a restarted one sends a fresh snapshot (with recent
        history), which the console rebuilds from. A refused token (401) or another
        protocol version ends a subscription: it is said as such and retried every 30 s,
        so the banner stays up instead of the console dying.
        """
        while True:
            sub = self.client.subscribe_trace(history=HISTORY)
            reader = LinkReader()
            try:
                async for rec in sub:
                    for out in reader.read(rec):
                        yield out
            except TraceUnauthorized as err:
                yield status(False, err.message, "unauthorized")
                await asyncio.sleep(REFUSED_RETRY_S)
            except TraceProtocolMismatch as err:
                yield status(False, err.message, "protocol")
                await asyncio.sleep(REFUSED_RETRY_S)
            except RamAKvError as err:
                yield status(False, str(err), "refused")
                await asyncio.sleep(5.0)
            finally:
                await sub.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()


def open_link(url: str, token: str | None = None) -> DaemonLink:
    """The link the app uses."""
    return SdkLink(url, token=token)
