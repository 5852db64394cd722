"""Messages the console posts, as dataclasses grouped by what they are about."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from ramakv_console.state import Changes


class Daemon:
    """About the connection and the daemon's answers."""

    @dataclass
    class ConnectionChanged(Message):
        """The trace connected or dropped."""

        connected: bool
        detail: str = ""

    @dataclass
    class StateUpdated(Message):
        """A batch of trace records was applied to the app's ConsoleState."""

        changes: Changes

    @dataclass
    class ReloadCatalogue(Message):
        """Ask list_events again (the fire-event form's event list)."""

    @dataclass
    class EventAnswered(Message):
        """An event the operator sent came back (ok or not)."""

        event: dict[str, Any]
        envelope: dict[str, Any]


class Sessions:
    """About the session table."""

    @dataclass
    class Open(Message):
        """Show one session's detail."""

        session_id: str

    @dataclass
    class Act(Message):
        """Run a session event (suspend, snapshot_restore, close, fork, fork_end) on it."""

        event_type: str
        session_id: str

    @dataclass
    class Fire(Message):
        """Open the fire-event form with this session prefilled (None: no session)."""

        session_id: str | None


class Chunks:
    """About manual chunk eviction."""

    @dataclass
    class EvictRequested(Message):
        """The operator asked to evict these chunks (a dry run comes first)."""

        hashes: list[str] = field(default_factory=list)

    @dataclass
    class Evicted(Message):
        """chunk_evict ran for real; its answer."""

        hashes: list[str]
        force: bool
        envelope: dict[str, Any]


class Config:
    """About the config editor."""

    @dataclass
    class Saved(Message):
        """A config file was written."""

        path: str
        changed: list[str]
