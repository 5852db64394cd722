"""The console's one door to the daemon, over ramakv_sdk (never ramakv_daemon)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ramakv_console.state import STATUS
from ramakv_sdk.client import AsyncClient
from ramakv_sdk.config import auth_token, daemon_url
from ramakv_sdk.errors import DaemonUnavailable, RamAKvError

SLOW_CLOSE_CODE = 4008  # the daemon closed a subscriber that fell behind


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


def status(connected: bool, detail: str) -> dict[str, Any]:
    """A connection marker."""
    return {"kind": STATUS, "connected": connected, "detail": detail}


class SdkLink:
    """DaemonLink over ramakv_sdk.client.AsyncClient."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 5.0) -> None:
        self.url = url
        self.client = AsyncClient(url, timeout=timeout, token=token or auth_token())

    async def send(self, event: dict[str, Any]) -> dict[str, Any]:
        try:
            return dict(await self.client.raw(event))
        except DaemonUnavailable as err:
            raise LinkDown(str(err)) from err
        except RamAKvError as err:  # not an envelope (wrong URL, 401 ...): show it as one
            return {"ok": False, "type": event.get("type"), "error": str(err)}

    async def trace(self) -> AsyncIterator[dict[str, Any]]:
        """The SDK's subscription; its markers become ``_status`` records.

        After a slow-subscriber close (4008) the SDK resumes with ``?since=``. Any other
        drop may be a daemon restart, whose sequence numbers start again from 0, so a
        ``since`` from before would replay the wrong range: the console then subscribes
        afresh and rebuilds from the new snapshot. A refused handshake (bad token) is
        retried every few seconds, so the banner stays up instead of the console dying.
        """
        connected = False
        while True:
            sub = self.client.subscribe_trace()
            had_data = False
            try:
                async for rec in sub:
                    kind = rec.get("kind")
                    if kind == "disconnected":
                        connected = False
                        code = rec.get("code")
                        why = rec.get("reason") or "connection lost"
                        yield status(False, f"{why} (code {code})" if code else str(why))
                        if had_data and code != SLOW_CLOSE_CODE:
                            break  # resubscribe for a fresh snapshot (see above)
                        continue
                    if kind == "reconnected" or not connected:
                        connected = True
                        yield status(True, "connected")
                    if kind in ("snapshot", "event"):
                        had_data = True
                        yield rec
            except RamAKvError as err:
                connected = False
                yield status(False, str(err))
                await asyncio.sleep(5.0)
            finally:
                await sub.aclose()

    async def aclose(self) -> None:
        await self.client.aclose()


def open_link(url: str, token: str | None = None) -> DaemonLink:
    """The link the app uses."""
    return SdkLink(url, token=token)
