"""backend_query (admin): ask the cache backend where chunks are."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import chunk_hashes_of
from ramakv_daemon.handlers.registry import HandlerContext, query_event
from ramakv_daemon.ports import Backend


@query_event(
    "backend_query",
    "Admin: ask the cache backend which tiers hold each chunk (noop backend: none)",
    required=("chunk_hashes",),
)
async def backend_query(ctx: HandlerContext, payload: dict, backend: Backend) -> Change:
    hashes = chunk_hashes_of(payload.get("chunk_hashes"), ctx.limits)
    result, where = await backend.query(hashes)
    return Change(
        data={
            "backend": backend.name,
            "ok": result.ok,
            "error": result.detail if not result.ok else None,
            "locations": {h: where.locations.get(h, []) for h in hashes},
        }
    )
