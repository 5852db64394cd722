"""How a trace follower resumes (sans I/O): what each close code means, the backoff, ?since=.

The SDK's subscription does the networking and asks :class:`Resume` what to do: which
query to connect with, how long to wait first, which marker to yield. The console follows
the trace through that subscription, so the policy lives here once:

* a drop is retried with exponential backoff and jitter; only data resets the backoff (a
  daemon that accepts the handshake and closes at once is not retried 20 times a second);
* the next connect asks ``?since=<last seq>&epoch=<its run>``: the same daemon run replays
  what was missed, another run (a restart numbers from 1 again) sends a fresh snapshot;
* without an epoch (an old daemon) only a slow-subscriber close (4008) keeps the place,
  any other drop may hide a restart, so a fresh snapshot is asked for;
* a protocol close (4010) is not retried: reconnecting cannot help.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from ramakv_protocol.dispatch import epoch_of, seq_of
from ramakv_protocol.records import DisconnectedMarker, DropError, ReconnectedMarker
from ramakv_protocol.wire import (
    PROTOCOL,
    PROTOCOL_CLOSE_CODE,
    SHUTDOWN_CLOSE_CODE,
    SLOW_CLOSE_CODE,
    TOO_LARGE_CLOSE_CODE,
)

FIRST_DELAY_S: Final = 0.1  # the first retry's delay before jitter; it doubles per failure
MAX_DELAY_S: Final = 5.0  # the default cap


@dataclass(frozen=True, slots=True)
class CloseMeaning:
    """What a websocket close code says to a follower."""

    error: DropError  # the marker's one word
    retry: bool  # False: reconnecting cannot help (the daemon speaks another version)
    keeps_place: bool  # True even without an epoch: the same daemon run will replay


_MEANINGS: Final = {
    SLOW_CLOSE_CODE: CloseMeaning("slow", retry=True, keeps_place=True),
    PROTOCOL_CLOSE_CODE: CloseMeaning("protocol", retry=False, keeps_place=False),
    TOO_LARGE_CLOSE_CODE: CloseMeaning("too_large", retry=True, keeps_place=False),
    SHUTDOWN_CLOSE_CODE: CloseMeaning("shutdown", retry=True, keeps_place=False),
}
_DROPPED: Final = CloseMeaning("dropped", retry=True, keeps_place=False)


def close_meaning(code: int | None) -> CloseMeaning:
    """The meaning of ``code`` (None: the connection ended without a close frame)."""
    return _MEANINGS.get(code, _DROPPED) if code is not None else _DROPPED


# The words a follower prints for a drop's ``error``.
DROP_WORDS: Final[Mapping[str, str]] = {
    "unreachable": "daemon unreachable",
    "too_large": "message too large",
    "slow": "fell behind",
    "shutdown": "daemon shutting down",
}


def drop_words(error: object) -> str:
    """How a follower says a drop of kind ``error``."""
    return DROP_WORDS.get(str(error), "connection lost")


class Backoff:
    """Delays between tries: doubling per failure from ``first`` up to ``cap``, each
    drawn between half and all of it; :meth:`reset` only once data has flowed."""

    def __init__(
        self,
        cap: float = MAX_DELAY_S,
        first: float = FIRST_DELAY_S,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.cap = cap
        self.first = first
        self.uniform = uniform
        self.failures = 0  # failed tries since data last flowed

    def failed(self) -> None:
        """One more try failed (a refused connect or a drop)."""
        self.failures += 1

    def reset(self) -> None:
        """Data flowed: the next outage starts from a short delay."""
        self.failures = 0

    def delay(self) -> float:
        """Seconds to wait before the next try: none after no failure."""
        if not self.failures:
            return 0.0
        base = min(self.cap, self.first * 2.0 ** min(self.failures, 20))
        return base * self.uniform(0.5, 1.0)


class Resume:
    """A follower's place in the trace and its outage bookkeeping.

    ``last_seq``/``epoch``: the newest record seen and its daemon run; ``history``: recent
    records asked for with every fresh snapshot (the daemon ignores it on a replay).
    """

    def __init__(
        self,
        since: int | None = None,
        session: str | None = None,
        history: int = 0,
        backoff: Backoff | None = None,
    ) -> None:
        self.last_seq = since
        self.epoch: str | None = None
        self.session = session
        self.history = history
        self.backoff = backoff if backoff is not None else Backoff()
        self.outage = False  # an outage was reported and has not ended yet
        self.reconnects = 0

    def query(self) -> dict[str, str]:
        """The query string of the next connect."""
        params = {"protocol": str(PROTOCOL)}
        if self.history:
            params["history"] = str(self.history)
        if self.last_seq is not None:
            params["since"] = str(self.last_seq)
            if self.epoch is not None:
                params["epoch"] = self.epoch
        if self.session is not None:
            params["session"] = self.session
        return params

    def delay(self) -> float:
        """Seconds to wait before the next connect."""
        return self.backoff.delay()

    def connected(self) -> ReconnectedMarker | None:
        """The handshake succeeded: a marker when it ends an outage."""
        if not self.outage:
            return None
        self.outage = False
        self.reconnects += 1
        return {
            "kind": "reconnected",
            "since": self.last_seq,
            "attempts": self.backoff.failures + 1,
        }

    def connect_failed(self, error: DropError, reason: str) -> DisconnectedMarker | None:
        """The connect failed: a marker the first time in an outage, None after."""
        self.backoff.failed()
        if self.outage:
            return None
        self.outage = True
        return self._marker(None, error, reason)

    def received(self, msg: Mapping[str, object]) -> None:
        """A message arrived: data flows (the backoff resets) and the place moves on."""
        self.backoff.reset()
        seq = seq_of(msg)
        if seq is not None:
            self.last_seq = seq
        epoch = epoch_of(msg)
        if epoch is not None:
            self.epoch = epoch

    def dropped(self, code: int | None, reason: str) -> DisconnectedMarker:
        """An open websocket ended (a close the follower may retry): the marker to yield;
        the place is forgotten when the daemon might have restarted unseen (no epoch, and
        not a 4008)."""
        meaning = close_meaning(code)
        self.backoff.failed()
        self.outage = True
        marker = self._marker(code, meaning.error, reason)
        if not meaning.keeps_place and self.epoch is None:
            self.last_seq = None
        return marker

    def _marker(self, code: int | None, error: DropError, reason: str) -> DisconnectedMarker:
        return {
            "kind": "disconnected",
            "code": code,
            "error": error,
            "reason": reason,
            "last_seq": self.last_seq,
        }
