"""The console's mirror of daemon state, kept current from trace records (pure, no UI)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

STATUS = "_status"  # kind of the connection markers mixed into the event history


@dataclass(slots=True)
class SessionView:
    """One session as the trace reports it."""

    session_id: str
    state: str = "active"
    turn_count: int = 0
    chunk_hashes: list[str] = field(default_factory=list)
    fork_holds: list[list[str]] = field(default_factory=list)
    last_event_ts: float = 0.0
    namespace: str = ""  # "" = the daemon's default namespace (the field is then absent)

    @classmethod
    def from_dict(cls, sid: str, d: dict[str, Any]) -> SessionView:
        """Build from a snapshot/delta session object."""
        return cls(
            session_id=str(d.get("session_id", sid)),
            state=str(d.get("state", "active")),
            turn_count=int(d.get("turn_count", 0) or 0),
            chunk_hashes=[str(h) for h in d.get("chunk_hashes") or []],
            fork_holds=[[str(h) for h in hold] for hold in d.get("fork_holds") or []],
            last_event_ts=float(d.get("last_event_ts") or 0.0),
            namespace=str(d.get("namespace") or ""),
        )

    def held(self) -> set[str]:
        """Hashes this session holds a reference on (its map when active, plus fork holds)."""
        out = set(self.chunk_hashes) if self.state == "active" else set()
        for hold in self.fork_holds:
            out.update(hold)
        return out


@dataclass(slots=True)
class Changes:
    """What one batch of trace records changed."""

    reset: bool = False
    sessions: set[str] = field(default_factory=set)
    chunks: set[str] = field(default_factory=set)
    events: list[dict[str, Any]] = field(default_factory=list)

    def merge(self, other: Changes) -> None:
        """Fold ``other`` into this one."""
        self.reset = self.reset or other.reset
        self.sessions |= other.sessions
        self.chunks |= other.chunks
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
    """Sessions, refcounts, a holder index and recent events; updated record by record."""

    def __init__(self, clock: Callable[[], float] = time.time, max_events: int = 5000) -> None:
        self.clock = clock
        self.sessions: dict[str, SessionView] = {}
        self.refcounts: dict[str, int] = {}
        self.holders: dict[str, set[str]] = {}
        # fork id -> {fork_id, session_id, created_ts, chunk_count}: open forks, also those
        # of closed parents (a fork outlives its parent's close).
        self.forks: dict[int, dict[str, Any]] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self.seq = 0
        self.event_times: deque[float] = deque(maxlen=20000)

    # ---- derived views ----------------------------------------------------------------
    def references(self) -> int:
        """Sum of all refcounts."""
        return sum(self.refcounts.values())

    def events_per_second(self, window: float = 5.0) -> float:
        """Events seen in the last ``window`` seconds, per second."""
        now = time.monotonic()
        while self.event_times and self.event_times[0] < now - window:
            self.event_times.popleft()
        return len(self.event_times) / window

    def shared_count(self, sid: str) -> int:
        """Distinct chunks of this session's map that some other session also holds."""
        s = self.sessions.get(sid)
        if s is None:
            return 0
        holders = self.holders
        empty: set[str] = set()
        # "held by someone else" without building a set difference: a system prompt's
        # holder set has one entry per session, and this runs for every row.
        return sum(
            1 for h in set(s.chunk_hashes)
            if len(hs := holders.get(h, empty)) > 1 or (hs and sid not in hs)
        )

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
        return ", ".join(
            f"#{f['fork_id']} {age_text(now - float(f.get('created_ts') or now))}"
            for f in self.forks_of(sid)
        ) or "-"

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
    def _unindex(self, s: SessionView, changes: Changes) -> None:
        for h in s.held():
            owners = self.holders.get(h)
            if owners is None:
                continue
            owners.discard(s.session_id)
            if len(owners) == 1:
                changes.sessions |= owners  # no longer shared with anyone
            if not owners:
                del self.holders[h]

    def _index(self, s: SessionView, changes: Changes) -> None:
        for h in s.held():
            owners = self.holders.setdefault(h, set())
            if len(owners) == 1:
                changes.sessions |= owners  # becomes shared
            owners.add(s.session_id)

    def _put_session(self, sid: str, value: Any, changes: Changes) -> None:
        old = self.sessions.get(sid)
        if old is not None:
            self._unindex(old, changes)
        changes.sessions.add(sid)
        if value is None:
            self.sessions.pop(sid, None)
            return
        if isinstance(value, dict):
            new = SessionView.from_dict(sid, value)
        else:  # a bare state string
            new = SessionView(sid) if old is None else SessionView.from_dict(sid, {
                "state": old.state, "turn_count": old.turn_count,
                "chunk_hashes": old.chunk_hashes, "fork_holds": old.fork_holds,
                "last_event_ts": old.last_event_ts})
            new.state = str(value)
        self.sessions[sid] = new
        self._index(new, changes)

    def apply_snapshot(self, msg: dict[str, Any]) -> Changes:
        """Replace everything with a snapshot message."""
        changes = Changes(reset=True)
        self.sessions.clear()
        self.holders.clear()
        for sid, d in (msg.get("sessions") or {}).items():
            self._put_session(sid, d, changes)
        self.refcounts = {h: int(n) for h, n in (msg.get("refcounts") or {}).items() if n}
        changes.chunks = set(self.refcounts)
        self.forks.clear()
        self._put_forks(msg.get("forks") or {})
        self.seq = int(msg.get("seq") or 0)
        return changes

    def apply_event(self, rec: dict[str, Any]) -> Changes:
        """Apply one event record's delta and remember the record."""
        changes = Changes(events=[rec])
        self.events.append(rec)
        self.event_times.append(time.monotonic())
        if isinstance(rec.get("seq"), int):
            self.seq = rec["seq"]
        delta = rec.get("delta") or {}
        for sid, value in (delta.get("sessions") or {}).items():
            self._put_session(sid, value, changes)
        forks = delta.get("forks") or {}
        if forks:
            changes.sessions |= self._put_forks(forks)
        for h, n in (delta.get("refcounts") or {}).items():
            changes.chunks.add(h)
            if n:
                self.refcounts[h] = int(n)
            else:
                self.refcounts.pop(h, None)
        return changes

    def apply(self, records: Iterable[dict[str, Any]]) -> Changes:
        """Apply a batch of trace records (snapshots and events) in order."""
        total = Changes()
        for rec in records:
            kind = rec.get("kind")
            if kind == "snapshot":
                snap = self.apply_snapshot(rec)  # a snapshot supersedes earlier changes
                snap.events = total.events + snap.events
                total = snap
            elif kind == "event":
                total.merge(self.apply_event(rec))
            elif kind == STATUS:
                self.events.append(rec)
                total.events.append(rec)
        return total
