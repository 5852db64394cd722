"""Typed shapes of each event's ``data`` (TypedDicts: plain dicts at run time)."""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class TurnStartData(TypedDict):
    prefetch_sent: bool
    prefetch_count: int


class TurnEndData(TypedDict):
    evicted_count: int
    map_updated: bool
    debug_written: bool


SnapshotRestoreData = TurnStartData


class SessionMapData(TypedDict):
    session_id: str
    chunk_hashes: list[str]


class SessionCloseData(TypedDict):
    evicted_count: int
    closed: bool


class SessionSuspendData(TypedDict):
    evicted_count: int
    suspended: bool


class SessionForkData(TypedDict):
    forked: bool
    fork_id: int


class SessionForkEndData(TypedDict):
    fork_end: bool  # false: that fork_id was already released or is unknown
    fork_id: int


class HealthData(TypedDict):
    status: str
    sessions_count: int


class EventSpecData(TypedDict):
    description: str
    required: list[str]
    optional: list[str]


class ListEventsData(TypedDict):
    events: dict[str, EventSpecData]  # the nine contract events
    admin_events: dict[str, EventSpecData]  # every other event


SessionState = Literal["active", "suspended", "closed"]


class ForkRow(TypedDict):
    fork_id: int
    created_ts: float
    age_s: float
    chunk_count: int


class SessionRow(TypedDict):
    session_id: str
    state: SessionState
    turn_count: int
    chunk_count: int
    fork_holds: int  # open forks
    forks: list[ForkRow]
    last_event_ts: float


class ListSessionsData(TypedDict):
    total: int
    sessions: list[SessionRow]


class ChunkRow(TypedDict):
    refcount: int
    holders: list[str]


class ChunkInfoData(TypedDict):
    chunks: dict[str, ChunkRow]


class ChunkEvictData(TypedDict):
    dry_run: bool
    force: bool
    evicted: list[str]
    refused: dict[str, list[str]]
    released: dict[str, list[str]]


class BackendQueryData(TypedDict):
    backend: str
    ok: bool
    error: str | None
    locations: dict[str, list[str]]


class Envelope(TypedDict, total=False):
    """The whole answer to POST /event."""

    ok: bool
    type: str
    data: dict[str, Any]
    error: str
