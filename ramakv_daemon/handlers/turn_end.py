"""turn_end: replace the session's map with the engine's, evicting chunks dropped to 0."""

from __future__ import annotations

from typing import Any, Self

import msgspec

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.catalogue import (
    MAX_DEBUG_DEPTH,
    JsonObject,
    Limits,
    check_depth,
    chunk_hashes_of,
    chunk_hashes_value,
    object_of,
    session_id_of,
    session_id_value,
)
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent, MissingField
from ramakv_daemon.handlers.messages import Message
from ramakv_daemon.handlers.registry import Effects, HandlerContext, typed_event
from ramakv_daemon.handlers.request_id import request_id_of, request_id_value

HASHES = "kv_transfer_params.chunk_hashes"


class KvTransferParams(msgspec.Struct, frozen=True):
    """What turn_end reads of the engine's kv_transfer_params (the rest is ignored)."""

    chunk_hashes: tuple[str, ...]


class TurnEnd(Message, frozen=True, tag="turn_end"):
    """turn_end's message: the session's new map, in the engine's order."""

    session_id: str
    kv_transfer_params: KvTransferParams
    debug_context: dict[str, Any] | None = None
    request_id: str | None = None

    @property
    def chunk_hashes(self) -> tuple[str, ...]:
        """The new map."""
        return self.kv_transfer_params.chunk_hashes

    def check(self, limits: Limits) -> None:
        session_id_value(self.session_id)
        chunk_hashes_value(self.kv_transfer_params.chunk_hashes, limits, HASHES)
        if self.debug_context is not None:
            check_depth(self.debug_context, MAX_DEBUG_DEPTH, "debug_context")
        request_id_value(self.request_id)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        session_id = session_id_of(payload)
        params = payload.get("kv_transfer_params")
        if params is not None and not isinstance(params, dict):
            raise InvalidEvent("'kv_transfer_params' must be an object")
        raw = (params or {}).get("chunk_hashes")
        if raw is None:
            # A missing list is a host or engine bug: a quiet success would hide it, and
            # reading it as [] would evict the whole session. Only an explicit [] empties it.
            raise MissingField(HASHES)
        hashes = KvTransferParams(tuple(chunk_hashes_of(raw, limits, HASHES)))
        debug_context = object_of(payload, "debug_context")
        if debug_context is not None:
            check_depth(debug_context, MAX_DEBUG_DEPTH, "debug_context")
        return cls(session_id, hashes, debug_context, request_id_of(payload))


@typed_event(
    TurnEnd,
    "Post-inference safe eviction + update: decrement refcount, evict only when refcount == 0",
    effects=Effects(turn=Turn.FINISH, grows=True, debug_file=True, takes_over=True, served=True),
)
def turn_end(ctx: HandlerContext, msg: TurnEnd, now: float) -> Change:
    change = ctx.manager.turn_end(msg.session_id, msg.chunk_hashes, now)
    change.facts.request_id = msg.request_id
    if msg.debug_context is not None:
        change.debug_context = msg.debug_context
    return change
