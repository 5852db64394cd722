"""health: liveness and session count."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.registry import READ, HandlerContext, event


@event("health", "Health check", effects=READ)
def health(ctx: HandlerContext, payload: dict, now: float) -> Change:
    change = ctx.manager.health()
    change.data["sessions_count"] = sum(len(m.sessions) for m in ctx.every().values())
    if ctx.node_id:  # a store shared by several daemons: say which one answers
        change.data["node_id"] = ctx.node_id
    return change
