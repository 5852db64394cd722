"""``if_idle_since``: the condition an idle policy's suspend or close carries, checked in the
same step as the apply (an event arriving between the sweep's look and its act wins)."""

from __future__ import annotations

import math

from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.core.session import Session

FIELD = "if_idle_since"


def idle_since_of(payload: dict) -> float | None:
    """The optional ``if_idle_since``: a wall-clock time (seconds, finite, >= 0) or None."""
    return idle_since_value(payload.get(FIELD))


def idle_since_value(value: object) -> float | None:
    """``value`` as ``if_idle_since`` (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidEvent(f"'{FIELD}' must be a number (a wall-clock time in seconds)")
    if value < 0:
        raise InvalidEvent(f"'{FIELD}' must be >= 0")
    return float(value)


def still_idle(session: Session | None, since: float) -> bool:
    """``session`` exists and no event touched it after ``since`` (a session with no stored
    time, written before the idle clock, counts as idle)."""
    return session is not None and session.last_event_ts <= since


def idle_for(session: Session, now: float) -> float:
    """Seconds since the session's last event, for the trace's notes (0 when none stored)."""
    if not session.last_event_ts:
        return 0.0
    return round(max(0.0, now - session.last_event_ts), 3)
