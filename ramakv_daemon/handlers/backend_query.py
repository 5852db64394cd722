"""backend_query (admin): ask the cache backend where chunks are."""

from __future__ import annotations

from typing import Self

from ramakv_daemon.core.catalogue import JsonObject, Limits, chunk_hashes_of, chunk_hashes_value
from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.messages import Message, as_data
from ramakv_daemon.handlers.registry import HandlerContext, typed_query
from ramakv_daemon.ports import Backend
from ramakv_protocol.replies import BackendQueryData


class BackendQuery(Message, frozen=True, tag="backend_query"):
    """backend_query's message."""

    chunk_hashes: tuple[str, ...]

    def check(self, limits: Limits) -> None:
        chunk_hashes_value(self.chunk_hashes, limits, "chunk_hashes")

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        return cls(tuple(chunk_hashes_of(payload.get("chunk_hashes"), limits)))


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
