"""list_events: every registered event's spec, read from the registry itself."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.registry import HandlerContext, event


@event("list_events", "List every event type with its description and fields")
def list_events(ctx: HandlerContext, payload: dict, now: float) -> Change:
    return Change(data={"events": {s.name: s.as_dict() for s in ctx.registry.specs()}})
