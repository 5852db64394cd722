"""Answers to events that carried an ``event_id``, kept for a bounded window, with a digest
of the request each answered (an id reused for a different event is refused, not answered)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import orjson
from blake3 import blake3

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.ports import AnswerRow, StoreError
from ramakv_daemon.telemetry.log_text import utf8


class TooDeep(ValueError):
    """The request nests deeper than any event may (orjson's limit, 255 levels)."""


def request_digest(payload: JsonObject) -> str:
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


def reused(event_id: str, type_: object) -> JsonObject:
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
    body: JsonObject

    def matches(self, digest: str) -> bool:
        return not self.digest or self.digest == digest


@dataclass(slots=True)
class AnswerSlot:
    """One idempotent event in progress: its id, its request's digest, and the answer text
    committed with its change (None while nothing was: then it is committed alone)."""

    event_id: str
    digest: str
    stored: str | None = None


class AnswerCache:
    """event_id -> first answer (LRU-bounded), plus the futures of ids still in flight."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._answers: OrderedDict[str, Remembered] = OrderedDict()
        self.inflight: dict[str, tuple[str, asyncio.Future[tuple[int, JsonObject]]]] = {}

    def get(self, event_id: str) -> Remembered | None:
        """The remembered answer, or None."""
        return self._answers.get(event_id)

    def remember(self, event_id: str, body: JsonObject, digest: str = "") -> None:
        """Keep ``body`` as the answer to ``event_id``; forget the oldest past capacity."""
        self._answers[event_id] = Remembered(digest, body)
        self._answers.move_to_end(event_id)
        while len(self._answers) > self.capacity:
            self._answers.popitem(last=False)

    def __len__(self) -> int:
        return len(self._answers)


class AnswerWriter(Protocol):
    """What keeps an answer alone: the group committer's ``submit_answer``."""

    def submit_answer(self, answer: AnswerRow) -> asyncio.Future[None]: ...


Reply = tuple[int, JsonObject]
Run = Callable[[JsonObject, AnswerSlot | None], Awaitable[Reply]]


class EventIds:
    """The event_id protocol: a retry gets the first answer back, an id reused for another
    request is refused, and the answer of an applied event is durable before it is sent.

    The answer is always the final reply: the pipeline stores it with the event's change
    (read as the commit is written, after everything that completes the reply); an event
    that changed nothing has it stored alone here, last, so a retry after a restart gets
    it rather than applying again.
    """

    def __init__(self, answers: AnswerCache, writer: AnswerWriter, run: Run) -> None:
        self.answers = answers
        self.writer = writer
        self.run = run

    async def handle(self, payload: JsonObject) -> Reply:
        """An event with an ``event_id``: the first answer, or apply it and keep its answer."""
        event_id = payload["event_id"]
        if not isinstance(event_id, str) or not 0 < len(event_id) <= 200 or not utf8(event_id):
            return 200, {
                "ok": False,
                "type": payload.get("type"),
                "error": "event_id must be a non-empty string of at most 200 characters "
                "(valid Unicode)",
            }
        try:
            digest = request_digest(payload)
        except TooDeep as err:
            return 200, {"ok": False, "type": payload.get("type"), "error": str(err)}
        known = self.answers.get(event_id)
        if known is not None:
            if not known.matches(digest):
                return 200, reused(event_id, payload.get("type"))
            return 200, known.body
        inflight = self.answers.inflight.get(event_id)
        if inflight is not None:
            if inflight[0] != digest:
                return 200, reused(event_id, payload.get("type"))
            return await asyncio.shield(inflight[1])
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.answers.inflight[event_id] = (digest, fut)
        try:
            slot = AnswerSlot(event_id, digest)
            status, body = await self.run(payload, slot)
            if status == 200 and body.get("ok") and slot.stored is None:
                status, body = await self._keep_alone(slot, body)
            if status == 200:
                self.answers.remember(event_id, body, digest)
            fut.set_result((status, body))
            return status, body
        finally:
            self.answers.inflight.pop(event_id, None)
            if not fut.done():
                fut.cancel()

    async def _keep_alone(self, slot: AnswerSlot, body: JsonObject) -> Reply:
        """The answer of an event that changed nothing (closing an unknown session, a
        read), committed alone; when that fails nothing is kept and a retry applies."""
        try:
            await self.writer.submit_answer(
                AnswerRow(slot.event_id, json.dumps(body), time.time(), slot.digest)
            )
        except StoreError as err:
            return 503, {"ok": False, "type": body.get("type"), "error": str(err)}
        return 200, body
