"""The result of applying one event: reply data, state delta, effects and undo record."""

from __future__ import annotations

from dataclasses import dataclass, field

from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session


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
        evict_delete: hashes no live session references: drop from every tier.
        evict_demote: hashes released by a suspend: drop from DDR, keep on disk.
        notes: extra facts for the trace and logs (never in ``data``).
        namespace: the namespace whose manager produced the change (set by the service).
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
    notes: dict[str, object] = field(default_factory=dict)
    namespace: str = ""

    @property
    def evicted_count(self) -> int:
        """Chunks evicted by this event, both kinds."""
        return len(self.evict_delete) + len(self.evict_demote)
