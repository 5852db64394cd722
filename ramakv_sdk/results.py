"""Typed shapes of each event's ``data``: the protocol's reply types, plus the envelope."""

from __future__ import annotations

from typing import Any, TypedDict

from ramakv_protocol.replies import (
    BackendQueryData,
    ChunkEvictData,
    ChunkInfoData,
    ChunkRow,
    ChunkTopData,
    EventSpecData,
    ForkExpireData,
    ForkRow,
    HealthData,
    ListEventsData,
    ListSessionsData,
    SessionChunksData,
    SessionCloseData,
    SessionForkData,
    SessionForkEndData,
    SessionMapData,
    SessionRow,
    SessionState,
    SessionSuspendData,
    SnapshotRestoreData,
    TurnEndData,
    TurnStartData,
)

__all__ = [
    "BackendQueryData",
    "ChunkEvictData",
    "ChunkInfoData",
    "ChunkRow",
    "ChunkTopData",
    "Envelope",
    "EventSpecData",
    "ForkExpireData",
    "ForkRow",
    "HealthData",
    "ListEventsData",
    "ListSessionsData",
    "SessionChunksData",
    "SessionCloseData",
    "SessionForkData",
    "SessionForkEndData",
    "SessionMapData",
    "SessionRow",
    "SessionState",
    "SessionSuspendData",
    "SnapshotRestoreData",
    "TurnEndData",
    "TurnStartData",
]


class Envelope(TypedDict, total=False):
    """The whole answer to POST /event."""

    ok: bool
    type: str
    data: dict[str, Any]
    error: str
