"""The handler registry: each event's spec next to its handler; list_events reads it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.catalogue import EventSpec, JsonObject, Limits
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import UnknownEventType
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.handlers.messages import Message, decode, fields_of, tag_of
from ramakv_daemon.ports import Backend


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
    namespace_info: Callable[[], list[JsonObject]] | None = None
    node_id: str = ""  # on a shared store: this node, owner of every session in memory

    def every(self) -> Mapping[str, SessionManager]:
        """namespace -> manager, for the events that look across namespaces."""
        return self.namespaces or {self.manager.namespace: self.manager}


# A handler returns its change, or (a sliced read) a generator that yields between slices
# and returns the change (ramakv_daemon.pipeline.reads runs it). It is given the event's
# typed message (a registered Handler's apply also takes a payload: it parses it first).
Applied = Change | Generator[None, None, Change]
ApplyFn = Callable[[HandlerContext, Any, float], Applied]
M = TypeVar("M", bound=Message)
# Read-only handlers that must ask the backend: they get the backend from the service.
QueryFn = Callable[[HandlerContext, JsonObject, Backend], Awaitable[Change]]


@dataclass(frozen=True, slots=True)
class Effects:
    """What follows a successful event beyond its reply, as its handler declares it (the
    pipeline and its reactions read this; no rule names an event anywhere else).

    Attributes:
        turn: its bearing on the session's turn in flight (the DDR budget's pins).
        grows: it can bring chunks into DDR, so a budget pass may follow it.
        reads: it only reads: while commits are in doubt it answers from committed state.
        reads_chunks: a read whose answer depends on the chunk tables (refcounts, parked);
            False for one that reads only sessions and forks (health, session_map): while
            commits are in doubt only those are taken back to their committed state, not
            the hundreds of counts each pending suspend changed.
        debug_file: with debug_enabled, its debug_context is written to a debug file
            and the reply says ``debug_written``.
        takes_over: it acts on its session, which on a shared store another node may
            own: this node takes it over first (reads answer from this node's memory).
        store_fork_id: it opens a fork, whose id on a shared store comes from the store.
        served: it says its session's request has been served (the answer went out): a
            prefetch still pending for that request is dropped and cancelled in the cache.
    """

    turn: Turn = Turn.NONE
    grows: bool = False
    reads: bool = False
    reads_chunks: bool = True
    debug_file: bool = False
    takes_over: bool = False
    store_fork_id: bool = False
    served: bool = False


NO_EFFECTS = Effects()
READ = Effects(reads=True)
SESSIONS_READ = Effects(reads=True, reads_chunks=False)


@dataclass(frozen=True, slots=True)
class Handler:
    """One event: its spec, the pure function that applies it (or an async query), what
    follows it, and its typed message (None: a handler registered by hand, which reads the
    payload).

    ``apply`` takes the message the pipeline decoded at its entry, or the payload, which
    the message's ``parse`` then checks field by field (today's texts) before the handler.
    """

    spec: EventSpec
    apply: ApplyFn | None = None
    query: QueryFn | None = None
    effects: Effects = NO_EFFECTS
    message: type[Message] | None = None

    def decode(self, payload: JsonObject, limits: Limits) -> Message | None:
        """The typed message of ``payload``; None when this event has no message type or
        the fast decode refused it (``apply`` then parses the payload, raising its error)."""
        if self.message is None or self.query is not None:
            # A query is handed the payload (the pipeline's query path): it decodes there,
            # after the namespace is resolved, as its checks always ran.
            return None
        return decode(self.message, payload, limits)


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


def typed_event(
    message: type[M], description: str, effects: Effects = NO_EFFECTS
) -> Callable[[Callable[..., Applied]], Callable[..., Applied]]:
    """Register the decorated pure function, which takes a ``message``, as the handler of
    the message's tag; the spec's fields are the message's (required, then optional)."""

    def wrap(fn: Callable[..., Applied]) -> Callable[..., Applied]:
        required, optional = fields_of(message)
        spec = EventSpec(tag_of(message), description, required, optional)

        def apply(ctx: HandlerContext, event: object, now: float, **kw: Any) -> Applied:
            if isinstance(event, message):
                return fn(ctx, event, now, **kw)
            return fn(ctx, message.parse(cast(JsonObject, event), ctx.limits), now, **kw)

        DEFAULT_REGISTRY.register(Handler(spec, apply, effects=effects, message=message))
        return fn

    return wrap


TypedQueryFn = Callable[[HandlerContext, M, Backend], Awaitable[Change]]


def typed_query(message: type[M], description: str) -> Callable[[TypedQueryFn[M]], TypedQueryFn[M]]:
    """Register the decorated coroutine, which takes a ``message``, as the read-only,
    backend-asking handler of the message's tag (the fast decode, else today's checks)."""

    def wrap(fn: TypedQueryFn[M]) -> TypedQueryFn[M]:
        required, optional = fields_of(message)
        spec = EventSpec(tag_of(message), description, required, optional)

        async def query(ctx: HandlerContext, payload: JsonObject, backend: Backend) -> Change:
            msg = decode(message, payload, ctx.limits) or message.parse(payload, ctx.limits)
            return await fn(ctx, msg, backend)

        DEFAULT_REGISTRY.register(Handler(spec, query=query, message=message))
        return fn

    return wrap
