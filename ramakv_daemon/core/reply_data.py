"""The reply data the core builds, each typed as its ramakv_protocol.replies TypedDict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ramakv_daemon.core.change import as_data

if TYPE_CHECKING:  # mypy checks each shape; at run time the core imports no protocol
    from ramakv_protocol.replies import (
        ExpiredFork,
        ForkExpireData,
        HealthData,
        SessionCloseData,
        SessionForkData,
        SessionForkEndData,
        SessionMapData,
        SessionSuspendData,
        TurnEndData,
        TurnStartData,
    )

# Each is one plain dict literal, as the manager wrote it inline: the same keys in the
# same order, so the wire's bytes do not change.


def prefetched(count: int) -> dict[str, object]:
    """turn_start's and snapshot_restore's data: ``count`` chunks ordered into DDR."""
    data: TurnStartData = {"prefetch_sent": bool(count), "prefetch_count": count}
    return as_data(data)


def turn_ended(evicted_count: int) -> dict[str, object]:
    """turn_end's data (debug_written is set by the pipeline once the file is written)."""
    data: TurnEndData = {
        "evicted_count": evicted_count,
        "map_updated": True,
        "debug_written": False,
    }
    return as_data(data)


def session_map(session_id: str, chunk_hashes: list[str]) -> dict[str, object]:
    """session_map's data."""
    data: SessionMapData = {"session_id": session_id, "chunk_hashes": chunk_hashes}
    return as_data(data)


def suspended(evicted_count: int, done: bool) -> dict[str, object]:
    """session_suspend's data (``done``: this event suspended it)."""
    data: SessionSuspendData = {"evicted_count": evicted_count, "suspended": done}
    return as_data(data)


def closed(evicted_count: int, done: bool) -> dict[str, object]:
    """session_close's data (``done``: this event closed it)."""
    data: SessionCloseData = {"evicted_count": evicted_count, "closed": done}
    return as_data(data)


def forked(fork_id: int) -> dict[str, object]:
    """session_fork's data."""
    data: SessionForkData = {"forked": True, "fork_id": fork_id}
    return as_data(data)


def fork_ended(fork_id: int, done: bool) -> dict[str, object]:
    """session_fork_end's data (``done`` false: that fork was released or is unknown)."""
    data: SessionForkEndData = {"fork_end": done, "fork_id": fork_id}
    return as_data(data)


def expired_fork(fork_id: int, session_id: str, age_s: float) -> ExpiredFork:
    """One fork of a fork_expire record (its age in ms precision)."""
    return {"fork_id": fork_id, "session_id": session_id, "age_s": round(age_s, 3)}


def forks_expired(expired: list[ExpiredFork], evicted_count: int) -> dict[str, object]:
    """The data of the daemon's own fork_expire record."""
    data: ForkExpireData = {"expired": expired, "evicted_count": evicted_count}
    return as_data(data)


def health(sessions_count: int) -> dict[str, object]:
    """health's data (its handler counts every namespace's sessions)."""
    data: HealthData = {"status": "running", "sessions_count": sessions_count}
    return as_data(data)
