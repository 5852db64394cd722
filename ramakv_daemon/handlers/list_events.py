"""list_events: the nine contract events apart from the admin ones, read from the registry."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.messages import Bare, as_data
from ramakv_daemon.handlers.registry import READ, HandlerContext, typed_event
from ramakv_protocol.replies import ListEventsData

# The seeds' contract, as the original's clients count it: data.events holds these alone.
CONTRACT_EVENTS = frozenset(
    {
        "turn_start",
        "turn_end",
        "snapshot_restore",
        "session_map",
        "session_close",
        "session_suspend",
        "session_fork",
        "session_fork_end",
        "health",
    }
)


class ListEvents(Bare, frozen=True, tag="list_events"):
    """list_events' message: no fields."""


@typed_event(
    ListEvents,
    "List every event type with its description and fields: the nine contract events "
    "under 'events', every other (admin) event under 'admin_events'",
    effects=READ,
)
def list_events(ctx: HandlerContext, msg: ListEvents, now: float) -> Change:
    specs = ctx.registry.specs()
    data: ListEventsData = {
        "events": {s.name: s.as_dict() for s in specs if s.name in CONTRACT_EVENTS},
        "admin_events": {s.name: s.as_dict() for s in specs if s.name not in CONTRACT_EVENTS},
    }
    return Change(data=as_data(data))
