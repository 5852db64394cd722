"""turn_start: prefetch the session's chunks before inference (unless told not to)."""

from __future__ import annotations

from typing import Self

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.catalogue import (
    JsonObject,
    Limits,
    bool_of,
    session_id_of,
    session_id_value,
)
from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.messages import Message, as_data
from ramakv_daemon.handlers.registry import Effects, HandlerContext, typed_event
from ramakv_daemon.handlers.request_id import request_id_of, request_id_value
from ramakv_protocol.replies import TurnStartData


class TurnStart(Message, frozen=True, tag="turn_start"):
    """turn_start's message (``"prefetch": null`` is parsed as true, as it always was)."""

    session_id: str
    prefetch: bool = True
    request_id: str | None = None

    def check(self, limits: Limits) -> None:
        session_id_value(self.session_id)
        request_id_value(self.request_id)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        session_id = session_id_of(payload)
        prefetch = bool_of(payload, "prefetch", True)
        return cls(session_id, prefetch, request_id_of(payload))


@typed_event(
    TurnStart,
    "Pre-inference prefetch: daemon reads chunk_hashes from the session map and prefetches "
    "(prefetch: false marks the turn without prefetching, e.g. when nothing would wait for it; "
    "request_id: the request it begins, whose turn_end cancels its prefetch)",
    effects=Effects(turn=Turn.START, grows=True, takes_over=True),
)
def turn_start(ctx: HandlerContext, msg: TurnStart, now: float) -> Change:
    change = ctx.manager.turn_start(msg.session_id, now)
    change.facts.request_id = msg.request_id
    if not msg.prefetch:
        # A prefetch nobody waits for races the prefill and only churns DDR (issue 23).
        change.prefetch = []
        change.data = as_data(TurnStartData(prefetch_sent=False, prefetch_count=0))
    return change
