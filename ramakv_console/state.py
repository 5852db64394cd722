"""The console's mirror of daemon state, kept current from protocol 2 trace records (pure).

Protocol 2 sends session summaries, never maps: the mirror holds one small row per
session and the daemon's totals; maps and refcounts are read on demand (session_chunks,
chunk_top). Applying a batch costs what the batch changed, never the number of sessions.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from ramakv_protocol.dispatch import TraceReader, is_kind
from ramakv_protocol.records import EventRecord, SnapshotHeader, SnapshotPart, Totals

STATUS = "_status"  # kind of the connection markers mixed into the event history


@dataclass(slots=True)
class SessionView:
    """One session as the trace summarises it."""

    session_id: str
    state: str = "active"
    turn_count: int = 0
    chunk_count: int = 0
    shared_count: int | None = 0  # None: the daemon has not computed it yet
    fork_holds: int = 0
    last_event_ts: float = 0.0
    namespace: str = ""  # "" = the daemon's default namespace (the field is then absent)

    @classmethod
    def from_dict(cls, sid: str, d: dict[str, Any]) -> SessionView:
        """Build from a snapshot row or a delta's session summary."""
        holds = d.get("fork_holds") or 0
        return cls(
            session_id=str(d.get("session_id", sid)),
            state=str(d.get("state", "active")),
            turn_count=int(d.get("turn_count") or 0),
            chunk_count=int(d.get("chunk_count") or 0),
            shared_count=(
                None if d.get("shared_count", 0) is None else int(d.get("shared_count") or 0)
            ),
            fork_holds=holds if isinstance(holds, int) else len(holds),
            last_event_ts=float(d.get("last_event_ts") or 0.0),
            namespace=str(d.get("namespace") or ""),
        )


@dataclass(slots=True)
class Changes:
    """What one batch of trace records changed."""

    reset: bool = False
    sessions: set[str] = field(default_factory=set)
    chunks: dict[str, int] = field(default_factory=dict)  # hash -> new refcount (0 = gone)
    events: list[dict[str, Any]] = field(default_factory=list)
    dropped_events: int = 0  # records of this batch not kept for the logs (a burst)
    # A record said that sessions it did not list may have a new shared_count
    # (delta.shared_changed): the app re-reads the shown rows' values (list_sessions).
    shared_stale: bool = False

    def merge(self, other: Changes) -> None:
        """Fold ``other`` into this one."""
        self.reset = self.reset or other.reset
        self.shared_stale = self.shared_stale or other.shared_stale
        self.sessions |= other.sessions
        self.chunks.update(other.chunks)
        self.events.extend(other.events)


def age_text(seconds: float) -> str:
    """12s, 3m, 5h, 2d."""
    if seconds < 0:
        seconds = 0
    if seconds < 60:
        return f"{int(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 86400:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


class ConsoleState:
    """Session rows, totals and recent events; updated record by record."""

    def __init__(self, clock: Callable[[], float] = time.time, max_events: int = 5000) -> None:
        self.clock = clock
        self.sessions: dict[str, SessionView] = {}
        self.suspended = 0  # kept as rows change: the header never recounts
        self.totals: Totals = {"sessions": 0, "chunks": 0, "references": 0}
        # fork id -> {fork_id, session_id, created_ts, chunk_count}: open forks, also those
        # of closed parents (a fork outlives its parent's close).
        self.forks: dict[int, dict[str, Any]] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self.seq = 0
        self.node_id = ""  # the daemon's node, on a store shared by several ("" otherwise)
        self.loading = False  # a snapshot's parts are still arriving
        self.event_times: deque[float] = deque(maxlen=20000)
        # Sessions whose shared_count was asked for and not sent since (see ask_shared).
        self.asking: set[str] = set()

    # ---- derived views ----------------------------------------------------------------
    def references(self) -> int:
        """Sum of all refcounts (the daemon's total)."""
        return self.totals.get("references", 0)

    def chunk_total(self) -> int:
        """Distinct referenced chunks (the daemon's total)."""
        return self.totals.get("chunks", 0)

    def events_per_second(self, window: float = 5.0) -> float:
        """Events seen in the last ``window`` seconds, per second."""
        now = time.monotonic()
        while self.event_times and self.event_times[0] < now - window:
            self.event_times.popleft()
        return len(self.event_times) / window

    def shared_count(self, sid: str) -> int | None:
        """Distinct chunks of this session's map some other session also holds (as the
        daemon computed it when it last sent the session; None: not computed yet)."""
        s = self.sessions.get(sid)
        return s.shared_count if s is not None else 0

    def age(self, sid: str) -> str:
        """Time since the session's last event."""
        s = self.sessions.get(sid)
        if s is None or not s.last_event_ts:
            return "-"
        return age_text(self.clock() - s.last_event_ts)

    def forks_of(self, sid: str) -> list[dict[str, Any]]:
        """The session's open forks, oldest first (its parent may be closed)."""
        return [f for _, f in sorted(self.forks.items()) if f.get("session_id") == sid]

    def fork_ages(self, sid: str) -> str:
        """'#1 5m, #3 2s' for the session's open forks; '-' when none."""
        now = self.clock()
        return (
            ", ".join(
                f"#{f['fork_id']} {age_text(now - float(f.get('created_ts') or now))}"
                for f in self.forks_of(sid)
            )
            or "-"
        )

    def _put_forks(self, forks: dict[str, Any]) -> set[str]:
        """Apply fork id -> summary (None = ended); the parents touched."""
        parents: set[str] = set()
        for fid, value in forks.items():
            old = self.forks.pop(int(fid), None)
            if old is not None:
                parents.add(str(old.get("session_id")))
            if value is not None:
                self.forks[int(fid)] = dict(value)
                parents.add(str(value.get("session_id")))
        return parents

    def session_events(self, sid: str, limit: int = 50) -> list[dict[str, Any]]:
        """The newest events that touched ``sid``, oldest first."""
        out: list[dict[str, Any]] = []
        for rec in reversed(self.events):
            if rec.get("session_id") == sid or sid in (rec.get("delta") or {}).get("sessions", {}):
                out.append(rec)
                if len(out) >= limit:
                    break
        out.reverse()
        return out

    # ---- updates ------------------------------------------------------------------------
    def ask_shared(self, sids: Iterable[str]) -> None:
        """Note that the shared_count of ``sids`` is being read (list_sessions)."""
        self.asking = set(sids)

    def apply_shared(self, rows: Iterable[Mapping[str, Any]]) -> Changes:
        """Take the shared_count of list_sessions rows asked for with :meth:`ask_shared`;
        a session sent by the trace since the question keeps the trace's (newer) value."""
        changes = Changes()
        for row in rows:
            sid, value = row.get("session_id"), row.get("shared_count")
            view = self.sessions.get(sid) if isinstance(sid, str) else None
            if view is not None and sid in self.asking and isinstance(value, int):
                view.shared_count = value
                changes.sessions.add(view.session_id)
        self.asking = set()
        return changes

    def _put(self, sid: str, value: Any, changes: Changes) -> None:
        self.asking.discard(sid)
        old = self.sessions.get(sid)
        if old is not None and old.state == "suspended":
            self.suspended -= 1
        changes.sessions.add(sid)
        if not isinstance(value, dict):
            self.sessions.pop(sid, None)
            return
        new = SessionView.from_dict(sid, value)
        self.sessions[sid] = new
        if new.state == "suspended":
            self.suspended += 1

    def apply_snapshot(self, msg: SnapshotHeader) -> Changes:
        """A snapshot header: forget every row; its parts follow."""
        self.sessions.clear()
        self.forks.clear()
        self.suspended = 0
        self.totals = (msg.get("totals") or self.totals).copy()
        self.seq = int(msg.get("seq") or 0)
        self.node_id = str(msg.get("node_id") or "")
        self.loading = True
        return Changes(reset=True)

    def apply_part(self, msg: SnapshotPart) -> Changes:
        """A snapshot_sessions part: its rows (and, filtered, its chunks' refcounts)."""
        changes = Changes()
        for row in msg.get("sessions") or ():
            if isinstance(row, dict) and isinstance(row.get("session_id"), str):
                self._put(row["session_id"], row, changes)
                self._put_forks({str(f["fork_id"]): f for f in row.get("forks") or ()})
        # Forks of closed parents (a live parent's come with its row).
        changes.sessions |= self._put_forks(
            {str(f["fork_id"]): f for f in msg.get("forks") or () if isinstance(f, dict)}
        )
        for h, n in (msg.get("refcounts") or {}).items():
            changes.chunks[str(h)] = int(n)
        if msg.get("last"):
            self.loading = False
        return changes

    def apply_event(
        self, rec: EventRecord, keep: bool = True, into: Changes | None = None
    ) -> Changes:
        """Apply one event record's delta (and remember it for the logs when ``keep``);
        what it changed is added to ``into`` (a batch's, so no Changes per record)."""
        logged = cast(dict[str, Any], rec)  # the logs keep records as plain dicts
        changes = Changes() if into is None else into
        if keep:
            self.events.append(logged)
            changes.events.append(logged)
        self.event_times.append(time.monotonic())
        if isinstance(rec.get("seq"), int):
            self.seq = rec["seq"]
        totals = rec.get("totals")
        if isinstance(totals, dict):
            self.totals = totals
        delta = rec.get("delta")
        if not delta:
            return changes
        sessions = delta.get("sessions")
        if sessions:
            for sid, value in sessions.items():
                self._put(sid, value, changes)
        forks = delta.get("forks")
        if forks:
            changes.sessions |= self._put_forks(forks)
        refcounts = delta.get("refcounts")
        if refcounts:
            chunks = changes.chunks
            for h, n in refcounts.items():
                chunks[h] = int(n or 0)
        if delta.get("shared_changed"):
            changes.shared_stale = True
        return changes

    def apply(self, records: Iterable[dict[str, Any]], keep_last: int = 500) -> Changes:
        """Apply a batch of trace records in order; only the newest ``keep_last`` events
        of a burst go to the logs (the state takes every one)."""
        batch = list(records)
        events = sum(1 for r in batch if is_kind(r, "event"))
        applier = BatchApplier(self, max(0, events - keep_last))
        for rec in batch:
            applier.read(rec)
        return applier.total


class BatchApplier(TraceReader[None]):
    """Applies one batch's records to a ConsoleState by kind, gathering what changed."""

    def __init__(self, state: ConsoleState, skip: int) -> None:
        self.state = state
        self.skip = skip  # the oldest events of a burst not kept for the logs
        self.total = Changes(dropped_events=skip)

    def on_snapshot(self, msg: SnapshotHeader) -> None:
        snap = self.state.apply_snapshot(msg)  # a snapshot supersedes earlier changes
        snap.events = self.total.events
        snap.dropped_events = self.total.dropped_events
        self.total = snap

    def on_snapshot_sessions(self, msg: SnapshotPart) -> None:
        self.total.merge(self.state.apply_part(msg))

    def on_event(self, msg: EventRecord) -> None:
        keep = self.skip <= 0
        self.skip -= 1
        self.state.apply_event(msg, keep, self.total)

    def other(self, msg: Mapping[str, object]) -> None:
        if msg.get("kind") == STATUS:  # the link's own connection markers go to the logs
            rec = dict(msg)
            self.state.events.append(rec)
            self.total.events.append(rec)
