"""The result of applying one event: reply data, state delta, effects and undo record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session


def as_data(reply: Mapping[str, object]) -> dict[str, object]:
    """A reply's ``data`` built as its protocol type (ramakv_protocol.replies, whose
    TypedDicts are plain dicts at run time, imported by the core for type checking only)
    as the Change carries it: no copy, and no call of typing.cast (the manager's
    replies pass here once an event)."""
    return reply  # type: ignore[return-value]


@dataclass(slots=True)
class Facts:
    """Facts about an applied event that the trace record carries as ``notes`` (never in
    the reply's ``data``); None or False = not a fact of this event.

    Attributes:
        turn: the session's turn count after a turn_end.
        forced: a chunk_evict with force dropped references.
        source_session_id: a snapshot_restore from another session's map.
        evicted_count: chunks evicted, where the reply does not say it.
        open_forks: forks still held after a session_close.
        fork_depth: the session's open forks after a session_fork.
        idle_s: how long the session had been idle when a conditioned suspend or close
            (``if_idle_since``, an idle policy's) acted on it.
        reason: why the sender sent it (a lifecycle event's optional ``reason`` field).
        request_id: the request of the session it begins or ends (turn_start,
            snapshot_restore, turn_end): a turn_end cancels only that request's prefetches.
    """

    turn: int | None = None
    forced: bool = False
    source_session_id: str | None = None
    evicted_count: int | None = None
    open_forks: int | None = None
    fork_depth: int | None = None
    idle_s: float | None = None
    reason: str | None = None
    request_id: str | None = None

    def as_notes(self) -> dict[str, object]:
        """The trace record's ``notes`` object: the facts that are set."""
        notes: dict[str, object] = {}
        if self.turn is not None:
            notes["turn"] = self.turn
        if self.forced:
            notes["forced"] = True
        if self.source_session_id is not None:
            notes["source_session_id"] = self.source_session_id
        if self.evicted_count is not None:
            notes["evicted_count"] = self.evicted_count
        if self.open_forks is not None:
            notes["open_forks"] = self.open_forks
        if self.fork_depth is not None:
            notes["fork_depth"] = self.fork_depth
        if self.idle_s is not None:
            notes["idle_s"] = self.idle_s
        if self.reason is not None:
            notes["reason"] = self.reason
        if self.request_id is not None:
            notes["request_id"] = self.request_id
        return notes


@dataclass(slots=True)
class Change:
    """Everything the service needs to carry out one applied event.

    Attributes:
        data: the reply's ``data`` object.
        durable: True when the store must commit before the reply.
        prev_sessions: session id -> state before the event (None = did not exist).
        prev_forks: fork id -> fork before the event (None = did not exist).
        prev_counts: chunk hash -> refcount before the event (0 = absent).
        prev_parked: chunk hash -> suspended-map count before the event.
        prefetch: hashes to bring into DDR, in reuse order.
        evict_delete: hashes dead by evidence (a declared release of private chunks, the
            retention sweep, an operator): drop from every tier.
        evict_demote: hashes to drop from DDR, keep on disk.
        evict_cold: hashes no longer named but not dead (a suspend, an inferred close, a
            refcount reaching 0 otherwise): ordered cold in the cache, never deleted.
        facts: extra facts for the trace and logs (never in ``data``).
        debug_context: a turn_end's debug context, for its debug file (never traced).
    """

    data: dict[str, object] = field(default_factory=dict)
    durable: bool = False
    prev_sessions: dict[str, Session | None] = field(default_factory=dict)
    prev_forks: dict[int, Fork | None] = field(default_factory=dict)
    prev_counts: dict[str, int] = field(default_factory=dict)
    prev_parked: dict[str, int] = field(default_factory=dict)
    prefetch: list[str] = field(default_factory=list)
    evict_delete: list[str] = field(default_factory=list)
    evict_demote: list[str] = field(default_factory=list)
    evict_cold: list[str] = field(default_factory=list)
    facts: Facts = field(default_factory=Facts)
    debug_context: dict[str, object] | None = None

    def fold(self, part: Change) -> None:
        """Fold ``part`` (applied after this change) into this one: the first previous
        value of each key wins, so undoing the whole undoes both."""
        for sid, prev in part.prev_sessions.items():
            self.prev_sessions.setdefault(sid, prev)
        for fid, fork in part.prev_forks.items():
            self.prev_forks.setdefault(fid, fork)
        for h, n in part.prev_counts.items():
            self.prev_counts.setdefault(h, n)
        for h, n in part.prev_parked.items():
            self.prev_parked.setdefault(h, n)
        self.evict_delete.extend(part.evict_delete)
        self.evict_demote.extend(part.evict_demote)
        self.evict_cold.extend(part.evict_cold)
        self.durable = self.durable or part.durable

    @property
    def evicted_count(self) -> int:
        """Chunks released to the cache by this event, every kind."""
        return len(self.evict_delete) + len(self.evict_demote) + len(self.evict_cold)

    @property
    def writes(self) -> bool:
        """True when the change must go through the store: state to persist or evictions
        to keep in the outbox."""
        return (
            self.durable
            or bool(self.evict_delete)
            or bool(self.evict_demote)
            or bool(self.evict_cold)
        )

    @property
    def notes(self) -> dict[str, object]:
        """The facts as the trace record's ``notes`` object."""
        return self.facts.as_notes()
