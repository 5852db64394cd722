"""health: liveness and session count."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.registry import HandlerContext, event


@event("health", "Health check")
def health(ctx: HandlerContext, payload: dict, now: float) -> Change:
    return ctx.manager.health()
