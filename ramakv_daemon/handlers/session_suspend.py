"""session_suspend: release the map's references and order zeros cold; keep the stored
row."""

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.events import session_id_of
from ramakv_daemon.handlers.idle_condition import FIELD, idle_for, idle_since_of, still_idle
from ramakv_daemon.handlers.reason import INFERRED, inferred_of, reason_of
from ramakv_daemon.handlers.registry import Effects, HandlerContext, event


@event(
    "session_suspend",
    "Suspend session: keep the stored map for snapshot_restore, release references and "
    "demote refcount==0 chunks out of DDR (kept on disk, where the disk tier's LRU has "
    f"them: a return is expected); never deleted. {INFERRED}=true says the host guessed "
    "(a run end, the idle policy): those chunks are ordered to the cold end of every "
    "tier's eviction order instead (demoted where the cache has no order route). With "
    f"{FIELD} (a wall-clock "
    "time), only a session with no event after it is suspended and its last_event_ts is "
    "kept (the idle policy's suspend); otherwise nothing changes and suspended is false",
    required=("session_id",),
    optional=(FIELD, "reason", INFERRED),
    effects=Effects(turn=Turn.LEAVE, takes_over=True),
)
def session_suspend(ctx: HandlerContext, payload: dict, now: float) -> Change:
    session_id = session_id_of(payload)
    reason = reason_of(payload)
    inferred = inferred_of(payload)  # a suspend never deletes, declared or not
    since = idle_since_of(payload)
    if since is None:
        change = ctx.manager.session_suspend(session_id, now, inferred=inferred)
    else:
        session = ctx.manager.sessions.get(session_id)
        if session is None or session.suspended or not still_idle(session, since):
            # "suspended" says what this event did: the idle sweep counts on it.
            return Change(data={"evicted_count": 0, "suspended": False})
        # Suspended "at" its own last event: a policy's suspend is not the host's activity,
        # so the session's idle close stays due when it was.
        change = ctx.manager.session_suspend(session_id, session.last_event_ts, inferred=inferred)
        change.facts.idle_s = idle_for(session, now)
    change.facts.reason = reason
    return change
