"""The payloads the SDK sends: each event's JSON body, built for the clients and the proxy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

_STR_ONLY = frozenset({str})


def hex_hash(h: str | int) -> str:
    """A chunk hash as the daemon wants it: strings verbatim, ints as signed hex ("-1f")."""
    if isinstance(h, bool):
        raise TypeError("a chunk hash cannot be a bool")
    if isinstance(h, int):
        return f"{h:x}"
    return h


def hash_list(hashes: Iterable[str | int]) -> list[str]:
    """Hashes in the caller's order, ints converted with :func:`hex_hash`."""
    if isinstance(hashes, str | bytes):
        raise TypeError("chunk hashes must be a list of strings, not one string")
    out = list(hashes)
    if set(map(type, out)) <= _STR_ONLY:  # the usual case, checked in C: a copy is enough
        return cast(list[str], out)  # every item's type was just seen to be str
    return [hex_hash(h) for h in out]


class MissingChunkHashes(ValueError):
    """A turn_end without a chunk_hashes list: the daemon refuses it, so it is never sent."""

    def __init__(self) -> None:
        super().__init__(
            "turn_end needs kv_transfer_params.chunk_hashes, a list ([] empties the map); "
            "an engine answer without one means its connector is not configured"
        )


def has_chunk_hashes(kv_transfer_params: Mapping[str, Any] | None) -> bool:
    """True when the engine's kv_transfer_params carries a chunk_hashes list."""
    return kv_transfer_params is not None and isinstance(
        kv_transfer_params.get("chunk_hashes"), list | tuple
    )


def kv_params(kv_transfer_params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The engine's kv_transfer_params, ready to send; int hashes become signed hex strings.

    Raises:
        MissingChunkHashes: no kv_transfer_params, or no ``chunk_hashes`` list in them. The
            daemon would refuse it (a missing list is a host or engine bug; reading it as
            ``[]`` would evict the whole session).
    """
    if kv_transfer_params is None or not has_chunk_hashes(kv_transfer_params):
        raise MissingChunkHashes()
    params = dict(kv_transfer_params)
    params["chunk_hashes"] = hash_list(params["chunk_hashes"])
    return params


def session_event(type_: str, session_id: str, **extra: Any) -> dict[str, Any]:
    """``{"type": type_, "session_id": session_id, **extra}`` without None-valued extras."""
    event: dict[str, Any] = {"type": type_, "session_id": session_id}
    event.update({k: v for k, v in extra.items() if v is not None})
    return event


def turn_start(
    session_id: str, prefetch: bool | None = None, request_id: str | None = None
) -> dict[str, Any]:
    """A turn_start event. ``request_id`` names the request it begins (at most 128
    characters): the turn_end carrying the same id cancels its prefetch, and no other."""
    return session_event("turn_start", session_id, prefetch=prefetch, request_id=request_id)


def turn_end(
    session_id: str,
    kv_transfer_params: Mapping[str, Any] | None = None,
    debug_context: Mapping[str, Any] | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """A turn_end event (raises MissingChunkHashes without a chunk_hashes list);
    ``request_id``: the request it ends (the prefetches of that request are cancelled;
    without one, those of the session's oldest request)."""
    event: dict[str, Any] = {
        "type": "turn_end",
        "session_id": session_id,
        "kv_transfer_params": kv_params(kv_transfer_params),
    }
    if debug_context is not None:
        event["debug_context"] = dict(debug_context)
    if request_id is not None:
        event["request_id"] = request_id
    return event


def snapshot_restore(
    session_id: str, source_session_id: str | None = None, request_id: str | None = None
) -> dict[str, Any]:
    """A snapshot_restore event, optionally seeding from another session's stored map;
    ``request_id``: the request its prefetch is for."""
    return session_event(
        "snapshot_restore",
        session_id,
        source_session_id=source_session_id,
        request_id=request_id,
    )


def chunk_event(type_: str, hashes: Iterable[str | int], **extra: Any) -> dict[str, Any]:
    """An admin event over chunk hashes (chunk_info, chunk_evict, backend_query)."""
    event: dict[str, Any] = {"type": type_, "chunk_hashes": hash_list(hashes)}
    event.update({k: v for k, v in extra.items() if v is not None})
    return event
