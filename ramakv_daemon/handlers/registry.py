"""The handler registry: each event's spec next to its handler; list_events reads it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import UnknownEventType
from ramakv_daemon.core.events import EventSpec, Limits
from ramakv_daemon.core.manager import SessionManager


@dataclass(slots=True)
class HandlerContext:
    """What a handler may use: the manager, the limits and the registry itself.

    ``manager`` is the event's namespace's; ``namespaces`` maps every namespace to its
    manager (health and list_sessions count across all of them).
    """

    manager: SessionManager
    limits: Limits
    registry: Registry
    namespaces: Mapping[str, SessionManager] | None = None
    namespace_info: Callable[[], list[dict[str, Any]]] | None = None
    node_id: str = ""  # on a shared store: this node, owner of every session in memory

    def every(self) -> Mapping[str, SessionManager]:
        """namespace -> manager, for the events that look across namespaces."""
        return self.namespaces or {self.manager.namespace: self.manager}


# A handler returns its change, or (a sliced read) a generator that yields between slices
# and returns the change (ramakv_daemon.reads runs it).
ApplyFn = Callable[[HandlerContext, dict[str, Any], float], Change | Generator[None, None, Change]]
# Read-only handlers that must ask the backend: they get the backend from the service.
QueryFn = Callable[[HandlerContext, dict[str, Any], Any], Awaitable[Change]]


@dataclass(frozen=True, slots=True)
class Handler:
    """One event: its spec and the pure function that applies it (or an async query)."""

    spec: EventSpec
    apply: ApplyFn | None = None
    query: QueryFn | None = None


class Registry:
    """Event name -> handler."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, handler: Handler) -> Handler:
        """Add ``handler`` under its spec's name (a second registration replaces it)."""
        self._handlers[handler.spec.name] = handler
        return handler

    def get(self, name: str) -> Handler:
        """The handler for ``name``, or UnknownEventType."""
        try:
            return self._handlers[name]
        except KeyError:
            raise UnknownEventType() from None

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def specs(self) -> list[EventSpec]:
        """Every registered spec, sorted by name."""
        return [self._handlers[n].spec for n in sorted(self._handlers)]


DEFAULT_REGISTRY = Registry()


def event(
    name: str, description: str, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()
) -> Callable[[ApplyFn], ApplyFn]:
    """Register the decorated pure function as the handler of event ``name``."""

    def wrap(fn: ApplyFn) -> ApplyFn:
        DEFAULT_REGISTRY.register(Handler(EventSpec(name, description, required, optional), fn))
        return fn

    return wrap


def query_event(
    name: str, description: str, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()
) -> Callable[[QueryFn], QueryFn]:
    """Register the decorated coroutine as a read-only, backend-asking handler."""

    def wrap(fn: QueryFn) -> QueryFn:
        DEFAULT_REGISTRY.register(
            Handler(EventSpec(name, description, required, optional), query=fn)
        )
        return fn

    return wrap
