"""Answers to events that carried an ``event_id``, kept for a bounded window, with a digest
of the request each answered (an id reused for a different event is refused, not answered)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from blake3 import blake3

from ramakv_daemon.ports import StoreError

log = logging.getLogger("ramakv")


class TooDeep(ValueError):
    """The request nests deeper than any event may (orjson's limit, 255 levels)."""


def request_digest(payload: dict[str, Any]) -> str:
    """A digest of the whole request (keys sorted): equal for a retry of the same event.

    Raises:
        TooDeep: nesting no event has (debug_context may nest 64 levels); refused up front,
            before the recursive encoders could raise RecursionError.
    """
    try:
        text = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError as err:
        if "Recursion limit" in str(err):
            raise TooDeep("request is nested more than 255 levels deep") from err
        # An integer over 64 bits: the standard encoder (orjson refused nothing deep).
        text = json.dumps(payload, sort_keys=True).encode("utf-8", "surrogatepass")
    return blake3(text).hexdigest(length=16)


def reused(event_id: str, type_: Any) -> dict[str, Any]:
    """The answer to a request that reuses ``event_id`` for a different event."""
    return {
        "ok": False,
        "type": type_,
        "error": f"event_id {event_id!r} was already used for a different event (another "
        "body); use a new event_id for a new event, the same body for a retry",
    }


@dataclass(frozen=True, slots=True)
class Remembered:
    """One answer and the digest of the request it answered ("" = unknown: older files)."""

    digest: str
    body: dict[str, Any]

    def matches(self, digest: str) -> bool:
        return not self.digest or self.digest == digest


@dataclass(slots=True)
class AnswerSlot:
    """One idempotent event in progress: its id, its request's digest, and the answer text
    committed with its change (None while nothing was)."""

    event_id: str
    digest: str
    stored: str | None = None


class AnswerCache:
    """event_id -> first answer (LRU-bounded), plus the futures of ids still in flight."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._answers: OrderedDict[str, Remembered] = OrderedDict()
        self.inflight: dict[str, tuple[str, asyncio.Future[tuple[int, dict[str, Any]]]]] = {}

    def get(self, event_id: str) -> Remembered | None:
        """The remembered answer, or None."""
        return self._answers.get(event_id)

    def remember(self, event_id: str, body: dict[str, Any], digest: str = "") -> None:
        """Keep ``body`` as the answer to ``event_id``; forget the oldest past capacity."""
        self._answers[event_id] = Remembered(digest, body)
        self._answers.move_to_end(event_id)
        while len(self._answers) > self.capacity:
            self._answers.popitem(last=False)

    def __len__(self) -> int:
        return len(self._answers)


class AnswerWriter(Protocol):
    """What keeps an answer alone: the group committer's ``submit_answer``."""

    def submit_answer(self, answer: tuple[str, str, float, str]) -> asyncio.Future[None]: ...


async def keep_final(
    committer: AnswerWriter, slot: AnswerSlot, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """Make the reply about to be sent the durable answer to its event_id; returns the
    (status, body) to send.

    Usually it went into the change's own commit. It did not when the event changed
    nothing (closing an unknown session, a read): then it is committed now, so a retry
    after a restart gets it rather than applying again. And the debug file, written after
    the commit, may have changed it (``debug_written``): then it is stored again.
    """
    final = json.dumps(body)
    if slot.stored == final:
        return 200, body
    try:
        await committer.submit_answer((slot.event_id, final, time.time(), slot.digest))
    except StoreError as err:
        if slot.stored is None:  # nothing changed and nothing is kept: a retry applies
            return 503, {"ok": False, "type": body.get("type"), "error": str(err)}
        log.warning(
            "event %r: the stored answer keeps debug_written=false: %s", slot.event_id[:200], err
        )
        return 200, json.loads(slot.stored)
    return 200, body
