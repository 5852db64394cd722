"""chunk_evict (admin): evict unreferenced chunks; referenced ones only with force."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.core.events import bool_of, chunk_hashes_of
from ramakv_daemon.handlers.registry import HandlerContext, event


@event(
    "chunk_evict",
    "Admin: delete chunks from every cache tier. Referenced chunks are refused (with their "
    "holders) unless force=true, which first drops them from the holders' maps and fork "
    "holds. dry_run=true reports and changes nothing",
    required=("chunk_hashes",),
    optional=("dry_run", "force"),
)
def chunk_evict(ctx: HandlerContext, payload: dict, now: float) -> Change:
    hashes = chunk_hashes_of(payload.get("chunk_hashes"), ctx.limits)
    dry_run = bool_of(payload, "dry_run")
    force = bool_of(payload, "force")
    if not hashes:
        raise InvalidEvent("'chunk_hashes' must not be empty")
    change = ctx.manager.chunk_evict(hashes, force=force, dry_run=dry_run, now=now)
    if force and change.data["released"] and not dry_run:
        change.facts.forced = True
    return change
