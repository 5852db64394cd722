"""The trace's messages as types: JSON objects on the wire, TypedDicts (plain dicts) here.

The daemon builds these dicts, the SDK yields them and the console applies them. Each
message has a ``kind``; ``seq`` and ``epoch`` are stamped on every numbered record by the
daemon's hub when it publishes it (the builders leave them out: :class:`EventBody`).
docs/trace.md says what each field means.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

SessionState = Literal["active", "suspended"]  # a closed session leaves the trace's state


class ForkSummary(TypedDict):
    """An open fork as the trace names it (never its hashes)."""

    fork_id: int
    session_id: str
    created_ts: float
    chunk_count: int
    namespace: NotRequired[str]  # only outside the default namespace


class SessionSummary(TypedDict):
    """One session in a snapshot part or a delta: counts, never the map itself."""

    session_id: str
    state: SessionState
    turn_count: int
    chunk_count: int  # the map's length, repeats included
    # distinct chunks of the map another session holds, as of the record (None: an older
    # daemon's start-up pass had not reached the session yet; this one always sends it)
    shared_count: int | None
    fork_holds: int
    forks: list[ForkSummary]
    last_event_ts: float
    namespace: NotRequired[str]  # only outside the default namespace


class Totals(TypedDict):
    """Over every namespace: sessions, distinct referenced chunks, references."""

    sessions: int
    chunks: int
    references: int


class SnapshotHeader(TypedDict):
    """The first message of a fresh snapshot; its parts follow."""

    kind: Literal["snapshot"]
    protocol: int
    seq: int  # the last event already included
    epoch: str  # this daemon run (16 hex digits)
    ts: float
    max_message_bytes: int
    totals: Totals
    session: str | None  # the ?session= filter, if any
    node_id: NotRequired[str]  # on a store shared by several daemons


class SnapshotPart(TypedDict):
    """One part of a snapshot; the last one says ``last: true``."""

    kind: Literal["snapshot_sessions"]
    seq: int
    epoch: str
    part: int
    last: bool
    refcounts: dict[str, int]  # empty unless filtered by session
    forks: list[ForkSummary]  # open forks of closed parents
    sessions: list[SessionSummary]


class Delta(TypedDict):
    """What an event changed, as absolute values (never increments)."""

    sessions: dict[str, SessionSummary | None]  # None: the session is gone
    refcounts: dict[str, int]  # 0: dropped from the table
    forks: NotRequired[dict[str, ForkSummary | None]]  # fork id -> summary; None: ended
    # True: sessions not in ``sessions`` may have a new shared_count (list_sessions has it)
    shared_changed: NotRequired[bool]


class Omitted(TypedDict):
    """How much a ``resync`` record left out (counts of what it would have listed)."""

    sessions: int
    refcounts: int
    prefetch: NotRequired[int]
    evict: NotRequired[int]
    demote: NotRequired[int]
    cold: NotRequired[int]


class EventNotes(TypedDict, total=False):
    """Extra facts of an event for clients (never part of the reply's ``data``)."""

    turn: int  # turn_end: the session's turn count after it
    forced: bool  # chunk_evict with force: references were dropped
    evicted_count: int
    source_session_id: str  # snapshot_restore from another session
    open_forks: int  # session_close: forks still open
    fork_depth: int  # session_fork: open forks after it
    idle_s: float  # suspend/close with if_idle_since (an idle policy's): seconds idle
    request_id: str  # turn_start, snapshot_restore, turn_end: the request it begins or ends


class EventBody(TypedDict):
    """One handled event as the daemon builds it, before the hub numbers it."""

    kind: Literal["event"]
    ts: float
    type: str  # as sent (cut to 200 characters when rejected)
    session_id: str | None
    ok: bool
    delta: Delta  # empty for a failed event
    data: NotRequired[dict[str, object] | None]  # ok only; None when over MAX_DATA_BYTES
    data_omitted_bytes: NotRequired[int]
    error: NotRequired[str]  # failed only
    totals: NotRequired[Totals]  # ok only
    prefetch: NotRequired[list[str]]
    evict: NotRequired[list[str]]  # deleted from every tier
    demote: NotRequired[list[str]]
    cold: NotRequired[list[str]]  # released, ordered cold (never deleted on this event)
    notes: NotRequired[EventNotes]
    namespace: NotRequired[str]
    resync: NotRequired[bool]  # cut down for size: a fresh snapshot follows at once
    omitted: NotRequired[Omitted]


class EventRecord(EventBody):
    """An event record as sent: numbered."""

    seq: int
    epoch: str


class BackendBody(TypedDict):
    """A backend call that failed (delivery is retried; ``backlog`` waits), as the daemon
    builds it, before the hub numbers it."""

    kind: Literal["backend"]
    ts: float
    op: str  # prefetch, evict_delete, evict_demote, order_cold
    count: int
    ok: bool
    status: int  # HTTP status, 0 when no answer came
    detail: str
    backlog: int


class BackendRecord(BackendBody):
    """A backend record as sent: numbered."""

    seq: int
    epoch: str


class BudgetBody(TypedDict):
    """A DDR budget pass that demoted sessions, before the hub numbers it."""

    kind: Literal["budget"]
    ts: float
    namespace: str
    victims: list[str]
    demote: list[str]
    usage_before: int
    usage_after: int
    budget: int


class BudgetRecord(BudgetBody):
    """A budget record as sent: numbered."""

    seq: int
    epoch: str


WindowOutcome = Literal["kept", "missed", "exposed", "repeated"]


class EvictWindowBody(TypedDict):
    """An eviction window's outcome (ascend_ext's evict window), before the hub numbers it."""

    kind: Literal["evict_window"]
    ts: float
    outcome: WindowOutcome
    count: int
    hashes: list[str]  # the first few
    namespace: NotRequired[str]


class EvictWindowRecord(EvictWindowBody):
    """An evict_window record as sent: numbered."""

    seq: int
    epoch: str


# What the daemon hands its hub to number and publish.
RecordBody = EventBody | BackendBody | BudgetBody | EvictWindowBody

TraceRecord = (
    SnapshotHeader | SnapshotPart | EventRecord | BackendRecord | BudgetRecord | EvictWindowRecord
)
RecordKind = Literal["snapshot", "snapshot_sessions", "event", "backend", "budget", "evict_window"]

# ---- the SDK's own markers, mixed into what its subscription yields ---------------------
# Why a follower lost the trace; "protocol" (4010) is never retried: the SDK raises instead.
DropError = Literal["unreachable", "http", "too_large", "slow", "shutdown", "dropped", "protocol"]


class DisconnectedMarker(TypedDict):
    """Once per outage (also when the first connection fails)."""

    kind: Literal["disconnected"]
    code: int | None  # the close code; None when no websocket was open
    error: DropError
    reason: str
    last_seq: int | None


class ReconnectedMarker(TypedDict):
    """Back after an outage."""

    kind: Literal["reconnected"]
    since: int | None  # the seq resumed after; None: a fresh snapshot was asked for
    attempts: int


Marker = DisconnectedMarker | ReconnectedMarker
MarkerKind = Literal["disconnected", "reconnected"]
TraceMessage = TraceRecord | Marker
Kind = RecordKind | MarkerKind
