"""backend_query (admin): ask the cache backend where chunks are."""

from __future__ import annotations

from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.messages import ChunkListMessage, as_data
from ramakv_daemon.handlers.registry import HandlerContext, typed_query
from ramakv_daemon.ports import Backend
from ramakv_protocol.replies import BackendQueryData


class BackendQuery(ChunkListMessage, frozen=True, tag="backend_query"):
    """backend_query's message."""


@typed_query(
    BackendQuery,
    "Admin: ask the cache backend which tiers hold each chunk (noop backend: none)",
)
async def backend_query(ctx: HandlerContext, msg: BackendQuery, backend: Backend) -> Change:
    hashes = list(msg.chunk_hashes)  # the backends were always handed a list
    result, where = await backend.query(hashes)
    data: BackendQueryData = {
        "backend": backend.name,
        "ok": result.ok,
        "error": result.detail if not result.ok else None,
        "locations": {h: where.locations.get(h, []) for h in hashes},
    }
    return Change(data=as_data(data))
