"""``trace_events = true``: every session map and the refcounts, logged after each event."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.telemetry.log_text import loggable

log = logging.getLogger("ramakv")


def log_state(managers: Mapping[str, SessionManager]) -> None:
    """One ``[trace]`` line per session and one of the refcounts per namespace."""
    for key, m in managers.items():
        where = f" namespace={loggable(key)}" if key else ""
        if not m.sessions and not key:
            log.info("[trace] sessions: <empty>")
        for sid, s in m.sessions.items():
            # Escaped: a newline in a session id must not start a forged log line.
            log.info(
                "[trace] session map session_id=%s state=%s turn_count=%d chunk_hashes=%s%s",
                loggable(sid, 1100),
                s.state,
                s.turn_count,
                list(s.chunk_hashes),
                where,
            )
        if m.sessions or not key:
            log.info("[trace] global refcounts%s %s", where, m.refcounts.as_dict())
