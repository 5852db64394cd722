"""What the screens and widgets are given: the state mirror, the daemon's door, and signals
for what changed; never the app (the app builds this and the screens, not the other way)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from textual.dom import DOMNode
from textual.signal import Signal

from ramakv_console.state import Changes, ConsoleState


class Sender(Protocol):
    """POST one event; the whole envelope (an ok:false one when the daemon is unreachable).
    ``quiet``: the views' own reads (pages of maps and refcounts) are not announced."""

    async def __call__(self, event: dict[str, Any], quiet: bool = False) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Connection:
    """The trace connection as the banner shows it."""

    connected: bool = False
    detail: str = "connecting"
    error: str = ""  # what kind of failure: unreachable, unauthorized, protocol, too_large...


@dataclass(frozen=True, slots=True)
class Catalogue:
    """list_events' answer: every event the daemon takes (contract and admin), and which of
    them it calls admin."""

    events: dict[str, Any] = field(default_factory=dict)
    admin: frozenset[str] = frozenset()


class ConsoleContext:
    """Shared by every screen of one console. The app writes it and publishes; the views
    read it and subscribe (``ctx.updated.subscribe(self, callback, immediate=True)``)."""

    def __init__(self, owner: DOMNode, url: str, state: ConsoleState, send: Sender) -> None:
        self.url = url
        self.state = state
        self.send = send
        self.connection = Connection()
        self.catalogue = Catalogue()
        # Each applied batch of trace records: what it changed.
        self.updated: Signal[Changes] = Signal(owner, "state-updated")
        self.connection_changed: Signal[Connection] = Signal(owner, "connection-changed")
        self.catalogue_loaded: Signal[Catalogue] = Signal(owner, "catalogue-loaded")
