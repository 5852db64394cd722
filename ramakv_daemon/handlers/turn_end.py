"""turn_end: replace the session's map with the engine's, evicting chunks dropped to 0."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent, MissingField
from ramakv_daemon.core.events import (
    MAX_DEBUG_DEPTH,
    check_depth,
    chunk_hashes_of,
    object_of,
    session_id_of,
)
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event
from ramakv_daemon.handlers.request_id import request_id_of


@event(
    "turn_end",
    "Post-inference safe eviction + update: decrement refcount, evict only when refcount == 0",
    required=("session_id", "kv_transfer_params"),
    optional=("debug_context", "request_id"),
    effects=Effects(turn=Turn.FINISH, grows=True, debug_file=True, takes_over=True, served=True),
)
def turn_end(ctx: HandlerContext, payload: dict, now: float) -> Change:
    session_id = session_id_of(payload)
    params = payload.get("kv_transfer_params")
    if params is not None and not isinstance(params, dict):
        raise InvalidEvent("'kv_transfer_params' must be an object")
    raw = (params or {}).get("chunk_hashes")
    field = "kv_transfer_params.chunk_hashes"
    if raw is None:
        # A missing list is a host or engine bug: a quiet success would hide it, and
        # reading it as [] would evict the whole session. Only an explicit [] empties it.
        raise MissingField(field)
    hashes = chunk_hashes_of(raw, ctx.limits, field)
    debug_context = object_of(payload, "debug_context")
    if debug_context is not None:
        check_depth(debug_context, MAX_DEBUG_DEPTH, "debug_context")
    request_id = request_id_of(payload)
    change = ctx.manager.turn_end(session_id, hashes, now)
    change.facts.request_id = request_id
    if debug_context is not None:
        change.debug_context = debug_context
    return change
