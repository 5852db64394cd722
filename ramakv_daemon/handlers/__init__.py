"""One handler per event; importing this package registers them all."""

from ramakv_daemon.handlers import (  # noqa: F401  (import registers)
    backend_query,
    chunk_evict,
    chunk_info,
    chunk_top,
    health,
    list_events,
    list_namespaces,
    list_sessions,
    session_chunks,
    session_close,
    session_fork,
    session_fork_end,
    session_map,
    session_suspend,
    snapshot_restore,
    turn_end,
    turn_start,
)
from ramakv_daemon.handlers.registry import DEFAULT_REGISTRY, Handler, HandlerContext, Registry

__all__ = ["DEFAULT_REGISTRY", "Handler", "HandlerContext", "Registry"]
