"""ram-a-kv's host SDK: AsyncClient, the fire-and-forget global client, the trace stream."""

from ramakv_sdk.client import AsyncClient
from ramakv_sdk.errors import DaemonUnavailable, RamAKvError
from ramakv_sdk.global_client import (
    flush,
    init,
    init_from_config,
    init_from_path,
    is_enabled,
    session_close,
    session_fork,
    session_fork_end,
    session_suspend,
    snapshot_restore,
    stats,
    turn_end,
    turn_start,
)
from ramakv_sdk.trace import TraceSubscription

__all__ = [
    "AsyncClient",
    "DaemonUnavailable",
    "RamAKvError",
    "TraceSubscription",
    "flush",
    "init",
    "init_from_config",
    "init_from_path",
    "is_enabled",
    "session_close",
    "session_fork",
    "session_fork_end",
    "session_suspend",
    "snapshot_restore",
    "stats",
    "turn_end",
    "turn_start",
]
