"""health: liveness and session count."""

from __future__ import annotations

from typing import cast

from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.messages import Bare
from ramakv_daemon.handlers.registry import SESSIONS_READ, HandlerContext, typed_event
from ramakv_protocol.replies import HealthData


class Health(Bare, frozen=True, tag="health"):
    """health's message: no fields."""


@typed_event(Health, "Health check", effects=SESSIONS_READ)
def health(ctx: HandlerContext, msg: Health, now: float) -> Change:
    change = ctx.manager.health()
    data = cast(HealthData, change.data)  # built as one by core.reply_data.health
    data["sessions_count"] = sum(len(m.sessions) for m in ctx.every().values())
    if ctx.node_id:  # a store shared by several daemons: say which one answers
        data["node_id"] = ctx.node_id
    return change
