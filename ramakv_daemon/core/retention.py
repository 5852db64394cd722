"""Retention order: which sessions leave DDR first when a namespace is over its budget."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Candidate:
    """What retention looks at in a session.

    Attributes:
        session_id: the session.
        suspended: True after session_suspend (the host said it is not coming back soon).
        last_event_ts: wall-clock time of its last event (smaller = idle longer).
        in_flight: True between its turn_start and its turn_end: the engine is using its
            chunks right now.
    """

    session_id: str
    suspended: bool
    last_event_ts: float
    in_flight: bool = False


def retention_key(c: Candidate) -> tuple[int, float, str]:
    """Sort key, smallest demoted first: suspended, then longest idle, then session id.

    The session id only breaks ties so that the order is total and repeatable.
    """
    return (0 if c.suspended else 1, c.last_event_ts, c.session_id)


def retention_order(candidates: Iterable[Candidate]) -> list[str]:
    """Session ids in demotion order; a session with a turn in flight is never listed.

    1. suspended sessions (their host parked them), longest idle first;
    2. then active sessions, longest idle first;
    never a session between turn_start and turn_end.
    """
    eligible = [c for c in candidates if not c.in_flight]
    eligible.sort(key=retention_key)
    return [c.session_id for c in eligible]
