"""The trace records the daemon publishes: an event's (ok or failed), a backend failure's,
a budget pass's; and the delta an event record carries."""

from __future__ import annotations

import time
from typing import cast

from ramakv_daemon.commit.record import Committed, Subscriber
from ramakv_daemon.core.catalogue import MAX_SESSION_ID_BYTES
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.refcount import counts_of
from ramakv_daemon.pipeline.outcome import Outcome
from ramakv_daemon.pipeline.reads import Delta
from ramakv_daemon.ports import BackendResult
from ramakv_daemon.routing.namespaces import Namespaces
from ramakv_daemon.trace.hub import TraceHub, cut
from ramakv_daemon.trace.protocol import fork_summary, moved_between, summary
from ramakv_daemon.trace.snapshot import totals
from ramakv_protocol.records import EventBody, EventNotes, SessionSummary


class TraceRecords(Subscriber):
    """Builds records from the namespaces' state and publishes them on the hub."""

    def __init__(self, hub: TraceHub, namespaces: Namespaces) -> None:
        self.hub = hub
        self.namespaces = namespaces

    def delta(self, c: Change, namespace: str) -> Delta:
        """What the event changed, as it stands now: session summaries (protocol 2 sends
        no maps), the refcounts, and ``shared_changed`` when sessions not listed may have
        a new shared_count (a chunk crossed 1 <-> 2: finding its other holders would cost
        a scan of every map or a holder index; readers ask list_sessions instead)."""
        manager = self.namespaces.managers[namespace]
        prev = c.prev_counts
        changed = list(prev)  # looked up once, at once: the shares test reads them
        refcounts = dict(zip(changed, counts_of(manager.refcounts.counts, changed), strict=True))
        delta: Delta = {
            "sessions": {sid: self._summary(manager, sid) for sid in c.prev_sessions},
            "refcounts": refcounts,
        }
        if moved_between(prev, refcounts.values(), manager.parked, len(manager.forks)):
            delta["shared_changed"] = True
        if c.prev_forks:  # fork id -> its summary, or None once ended
            forks = manager.forks
            delta["forks"] = {
                str(fid): (fork_summary(f) if (f := forks.get(fid)) is not None else None)
                for fid in c.prev_forks
            }
        return delta

    def _summary(self, manager: SessionManager, sid: str) -> SessionSummary | None:
        """A session's trace summary now (None when gone)."""
        s = manager.sessions.get(sid)
        if s is None:
            return None
        table = manager.refcounts
        return summary(s, table.counts, manager.forks.of(sid), table.shared)

    def event(self, o: Outcome) -> None:
        """An applied event's record."""
        c = o.change
        record: EventBody = {
            "kind": "event",
            "ts": time.time(),
            "type": o.type_,
            "session_id": o.session_id,
            "ok": True,
            "data": o.data,
            "delta": o.delta or self.delta(c, o.ns.key),
            "prefetch": c.prefetch,
            "evict": c.evict_delete,
            "demote": c.evict_demote,
            "cold": c.evict_cold,
            "totals": totals(self.namespaces.managers),
        }
        if o.ns.key:
            record["namespace"] = o.ns.key
        notes = c.facts.as_notes()
        if notes:
            record["notes"] = cast(EventNotes, notes)  # core stays free of the protocol
        self.hub.publish(record, o.touched)

    def on_committed(self, c: Committed) -> None:
        """Its part as a commit's Subscriber: each committed event's record, in apply order (replies
        resume later, in any order; reads answer from committed state, so none of them
        can be published carrying an older map than a write already published)."""
        event = self.event
        for r in c.records:
            for o in r.replies:
                if isinstance(o, Outcome):
                    o.committed(event)

    def failed(self, type_: str, session_id: str | None, error: str) -> None:
        """A refused event's record. The client's other strings are cut (they are of any
        size, and the ring must not keep megabytes of them); a session_id a session could
        have (at most MAX_SESSION_ID_BYTES) is kept whole, so ``?session=`` finds it."""
        self.hub.publish(
            {
                "kind": "event",
                "ts": time.time(),
                "type": cut(type_),
                "session_id": session_id if _could_name_a_session(session_id) else cut(session_id),
                "ok": False,
                "error": cut(error, 500),
                "delta": {"sessions": {}, "refcounts": {}},
            }
        )


def _could_name_a_session(session_id: object) -> bool:
    """A string no longer than a valid session id (longer ones name no session)."""
    if not isinstance(session_id, str):
        return session_id is None
    if len(session_id) <= MAX_SESSION_ID_BYTES // 4:  # 4 bytes per character at most
        return True
    return len(session_id.encode("utf-8", "surrogatepass")) <= MAX_SESSION_ID_BYTES


def publish_backend_failure(
    hub: TraceHub, op: str, count: int, result: BackendResult, backlog: int
) -> None:
    """A backend call that failed, with the eviction backlog it leaves (a dispatcher's
    ``on_failure``)."""
    hub.publish(
        {
            "kind": "backend",
            "ts": time.time(),
            "op": op,
            "count": count,
            "ok": False,
            "status": result.status,
            "detail": result.detail,
            "backlog": backlog,
        }
    )
