"""What follows an event once applied and committed: reactions, run in order, each
reading the outcome's typed fields and its handler's declared effects."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.pipeline.outcome import Outcome
from ramakv_daemon.pipeline.trace_records import TraceRecords
from ramakv_daemon.telemetry.log_text import loggable
from ramakv_daemon.telemetry.metrics import DaemonMetrics
from ramakv_daemon.telemetry.state_log import log_state
from ramakv_protocol.records import BudgetBody

log = logging.getLogger("ramakv")


@dataclass(slots=True)
class FollowUp:
    """What the reactions decide for one event, beside its outcome (the budget policy
    writes it, the later steps read it).

    Attributes:
        prefetch: what is sent to the cache after it (a demoted session back is prefetched
            whole; None: the change's own).
        budget_due: when a DDR budget pass is due after it (the policy's clock), if one is.
        budget_record: the trace record of the budget pass it triggered, if any.
    """

    prefetch: list[str] | None = None
    budget_due: float | None = None
    budget_record: BudgetBody | None = None


# A step after a success. Most are plain calls; one that sends a command (the budget's
# demotions) returns what to await, so an event without one creates no coroutine.
Reaction = Callable[[Outcome, FollowUp], Awaitable[None] | None]


def warn_forced(o: Outcome, _f: FollowUp) -> None:
    """A chunk_evict with force dropped references: say so in the log."""
    if o.change.facts.forced:
        log.warning("chunk_evict force: released references %s", o.data.get("released"))


def send_prefetch(o: Outcome, f: FollowUp) -> None:
    """Drop the prefetches of the request now served (turn_end: the one its request_id
    names, else the session's oldest), then bring the event's chunks into DDR (after the
    budget chose them; a new prefetch has a new tag, so the cancel never stops it)."""
    request_id = o.change.facts.request_id
    if o.effects.served and o.session_id is not None:
        o.ns.dispatcher.served(o.session_id, request_id)
        request_id = None  # what it prefetches itself is for the session's next request
    hashes = o.change.prefetch if f.prefetch is None else f.prefetch
    o.ns.dispatcher.prefetch(o.session_id, hashes, request_id, o.effects.turn is Turn.START)


class Demotions:
    """The port a due DDR budget pass is sent through (the composition root gives the
    bus's: a DemoteOverBudget command; the pipeline knows nothing above it)."""

    __slots__ = ()

    async def demote(self, namespace: str, now: float) -> BudgetBody | None:
        """Run ``namespace``'s pass at ``now``; its trace record (None: nothing demoted)."""
        return None


def send_demotions(demotions: Demotions) -> Reaction:
    """The pass the budget policy found due, through ``demotions``, its record the event's
    follow-up; after the policy and before the event's prefetch, so the demotions go out
    first. An event with no pass due creates no coroutine and calls nothing above."""

    async def send(key: str, now: float, f: FollowUp) -> None:
        f.budget_record = await demotions.demote(key, now)

    def due(o: Outcome, f: FollowUp) -> Awaitable[None] | None:
        return None if f.budget_due is None else send(o.ns.key, f.budget_due, f)

    return due


class Reactions:
    """The reactions after a successful event and the bookkeeping of a failed one."""

    def __init__(
        self,
        steps: Sequence[Reaction],
        records: TraceRecords,
        metrics: DaemonMetrics,
        managers: Mapping[str, SessionManager],
        log_states: bool,
    ) -> None:
        """``steps``: what follows every success, in order (a new effect is one more
        step); then the event is counted and logged. ``log_states``: the config's
        trace_events (every map logged after each event)."""
        self.steps = tuple(steps)
        self.records = records
        self.metrics = metrics
        self.managers = managers
        self.log_states = log_states

    async def succeeded(self, o: Outcome) -> None:
        """Run every step, then count and log the event. A step's command is handled at
        once (an immediate one, with no await of its own): all of it in one loop step."""
        follow = FollowUp()
        for step in self.steps:
            sent = step(o, follow)
            if sent is not None:
                await sent
        elapsed = time.perf_counter() - o.started
        self.metrics.event(o.type_, True, elapsed)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "ram-a-kv event completed type=%s session_id=%s ms=%.2f",
                o.type_,
                loggable(o.session_id or ""),
                elapsed * 1000,
            )
        if self.log_states:
            log_state(self.managers)

    def failed(self, type_: str, session_id: str | None, error: str, started: float) -> None:
        """Count, log and trace a refused event."""
        self.metrics.event(type_, False, time.perf_counter() - started)
        log.warning(
            "ram-a-kv event failed type=%s session_id=%s error=%s",
            loggable(type_),
            loggable(session_id or ""),
            loggable(error, 500),
        )
        self.records.failed(type_, session_id, error)
        if self.log_states:
            log_state(self.managers)


def publish_event(records: TraceRecords) -> Reaction:
    """The event's trace record, unless its commit published it already."""

    def publish(o: Outcome, _f: FollowUp) -> None:
        if not o.published:
            records.event(o)

    return publish


def publish_budget(records: TraceRecords) -> Reaction:
    """The budget pass's record, after the event's."""

    def publish(o: Outcome, f: FollowUp) -> None:
        if f.budget_record is not None:
            records.hub.publish(f.budget_record)

    return publish
