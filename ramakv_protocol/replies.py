"""Each event's reply ``data`` as a type (TypedDicts: plain dicts at run time).

The same objects travel in POST /event answers and, copied, in the trace's event records
(``data``). The SDK's client methods return them (ramakv_sdk.results re-exports them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, NotRequired, TypedDict

from ramakv_protocol.records import ForkSummary


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
    node_id: NotRequired[str]  # on a store shared by several daemons


class EventSpecData(TypedDict):
    description: str
    required: list[str]
    optional: list[str]


class ListEventsData(TypedDict):
    events: dict[str, EventSpecData]  # the nine contract events
    admin_events: dict[str, EventSpecData]  # every other event


ListedState = Literal["active", "suspended", "closed"]  # closed: its forks are still open
SessionState = ListedState  # the name ramakv_sdk.results has always used


class ForkRow(TypedDict):
    fork_id: int
    created_ts: float
    age_s: float
    chunk_count: int


class SessionRow(TypedDict):
    session_id: str
    state: ListedState
    turn_count: int
    chunk_count: int
    shared_count: int  # distinct chunks of the map another session holds (closed: 0)
    fork_holds: int  # open forks
    forks: list[ForkRow]
    last_event_ts: float
    namespace: NotRequired[str]  # only outside the default namespace
    owner: NotRequired[str]  # on a store shared by several daemons: the node that owns it


class ListSessionsData(TypedDict):
    total: int
    sessions: list[SessionRow]


class ChunkRow(TypedDict):
    refcount: int
    holders: list[str]


class ChunkInfoData(TypedDict):
    chunks: dict[str, ChunkRow]


class TopChunk(TypedDict):
    hash: str
    refcount: int


class ChunkTopData(TypedDict):
    total: int
    total_exact: bool  # false when a prefix matched more than a million
    offset: int
    prefix: str
    chunks: list[TopChunk]


class MapChunk(TypedDict):
    pos: int
    hash: str
    refcount: int
    others: int  # references other sessions hold on it


class ForkWithHashes(ForkSummary):
    chunk_hashes: list[str]


class SessionChunksData(TypedDict):
    session_id: str
    state: ListedState
    turn_count: int
    total: int
    offset: int
    chunks: list[MapChunk]
    fork_holds: NotRequired[list[list[str]]]  # with forks: true
    forks: NotRequired[list[ForkWithHashes]]  # with forks: true


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


class ExpiredFork(TypedDict):
    fork_id: int
    session_id: str
    age_s: float


class ForkExpireData(TypedDict):
    """The ``data`` of the daemon's own ``fork_expire`` records (never a reply)."""

    expired: list[ExpiredFork]
    evicted_count: int


# The reply type of each event whose ``data`` has a fixed shape (list_namespaces answers
# the deployments' rows as the daemon describes them: not typed here).
REPLY_TYPES: Final[Mapping[str, type]] = {
    "turn_start": TurnStartData,
    "turn_end": TurnEndData,
    "snapshot_restore": SnapshotRestoreData,
    "session_map": SessionMapData,
    "session_close": SessionCloseData,
    "session_suspend": SessionSuspendData,
    "session_fork": SessionForkData,
    "session_fork_end": SessionForkEndData,
    "health": HealthData,
    "list_events": ListEventsData,
    "list_sessions": ListSessionsData,
    "chunk_info": ChunkInfoData,
    "chunk_top": ChunkTopData,
    "session_chunks": SessionChunksData,
    "chunk_evict": ChunkEvictData,
    "backend_query": BackendQueryData,
    "fork_expire": ForkExpireData,
}
