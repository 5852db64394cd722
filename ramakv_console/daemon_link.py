"""The console's one door to the daemon, over ramakv_sdk (never ramakv_daemon)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from ramakv_console.state import STATUS
from ramakv_sdk.client import AsyncClient
from ramakv_sdk.config import daemon_url, load_config
from ramakv_sdk.errors import (
    DaemonUnavailable,
    RamAKvError,
    TraceProtocolMismatch,
    TraceUnauthorized,
)

SLOW_CLOSE_CODE = 4008  # the daemon closed a subscriber that fell behind
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

        After a slow-subscriber close (4008) the SDK resumes with ``?since=`` (a replay).
        Any other drop may be a daemon restart, whose sequence numbers start again from 0,
        so the console subscribes afresh and rebuilds from the new snapshot (with recent
        history). A refused token (401) or another protocol version is said as such and
        retried every 30 s, so the banner stays up instead of the console dying.
        """
        connected = False
        while True:
            sub = self.client.subscribe_trace(history=HISTORY)
            had_data = False
            try:
                async for rec in sub:
                    kind = rec.get("kind")
                    if kind == "disconnected":
                        connected = False
                        code = rec.get("code")
                        why = rec.get("reason") or "connection lost"
                        yield status(
                            False,
                            f"{why} (code {code})" if code else str(why),
                            str(rec.get("error") or "unreachable"),
                        )
                        if had_data and code != SLOW_CLOSE_CODE:
                            break  # resubscribe for a fresh snapshot (see above)
                        continue
                    if kind == "reconnected" or not connected:
                        connected = True
                        yield status(True, "connected")
                    if kind in ("snapshot", "snapshot_sessions", "event"):
                        had_data = True
                        yield rec
            except TraceUnauthorized as err:
                connected = False
                yield status(False, err.message, "unauthorized")
                await asyncio.sleep(REFUSED_RETRY_S)
            except TraceProtocolMismatch as err:
                connected = False
                yield status(False, err.message, "protocol")
                await asyncio.sleep(REFUSED_RETRY_S)
            except RamAKvError as err:
                connected = False
                yield status(False, str(err), "refused")
                await asyncio.sleep(5.0)
            finally:
                await sub.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()


def open_link(url: str, token: str | None = None) -> DaemonLink:
    """The link the app uses."""
    return SdkLink(url, token=token)
