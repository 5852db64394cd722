"""chunk_info (admin): refcount and holders of each given chunk."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import chunk_hashes_of
from ramakv_daemon.handlers.registry import HandlerContext, event


@event(
    "chunk_info",
    "Admin: refcount and holding sessions of each chunk (refcount 0 = not referenced)",
    required=("chunk_hashes",),
)
def chunk_info(ctx: HandlerContext, payload: dict, now: float) -> Change:
    hashes = chunk_hashes_of(payload.get("chunk_hashes"), ctx.limits)
    holders = ctx.manager.holders_of(hashes)
    counts = ctx.manager.refcounts
    return Change(
        data={"chunks": {h: {"refcount": counts.get(h), "holders": holders[h]} for h in hashes}}
    )
