"""Trace protocol 2 on the wire: the version, the close codes and reasons, the size bounds."""

from __future__ import annotations

from typing import Final

PROTOCOL: Final = 2  # served when ?protocol= is absent; the snapshot header says it too

# ---- size bounds (docs/trace.md) -------------------------------------------------------
# No trace message the daemon sends is larger than this, whatever the store holds.
MAX_MESSAGE_BYTES: Final = 1 << 20
# What the Python SDK accepts: room above the daemon's bound (a client must take at least it).
CLIENT_MAX_MESSAGE_BYTES: Final = 4 << 20
# An event's reply ``data`` is copied into its record only up to this size: admin reads
# (list_sessions, chunk_top, ...) answer pages that the trace has no use for.
MAX_DATA_BYTES: Final = 16 << 10
# Snapshot parts are cut at about this size.
PART_BYTES: Final = 256 << 10
# ?history=N is capped at this many records.
MAX_HISTORY: Final = 1000

# ---- close codes ------------------------------------------------------------------------
SLOW_CLOSE_CODE: Final = 4008  # "you fell behind": reconnect with ?since=<last seq>&epoch=
PROTOCOL_CLOSE_CODE: Final = 4010  # the client asked for another version (?protocol=N)
SHUTDOWN_CLOSE_CODE: Final = 1001  # RFC 6455 "going away": the daemon is stopping
TOO_LARGE_CLOSE_CODE: Final = 1009  # RFC 6455 "message too big": over the client's limit

# ---- close reasons (the text that comes with the code) ---------------------------------
SHUTDOWN_REASON: Final = "daemon shutting down"
PROTOCOL_REASON: Final = (
    f"trace protocol {PROTOCOL} required (?protocol={PROTOCOL}); upgrade the client"
)


def slow_reason(queued: int) -> str:
    """The reason of a 4008 close: how many messages were waiting for the subscriber."""
    return f"subscriber too slow: {queued} messages queued; reconnect with ?since=<last seq>"
