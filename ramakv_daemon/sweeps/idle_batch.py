"""The idle policies' events applied a batch per loop step: one commit, one outbox row (one
delivery pass) for the batch, each event still its own trace record, counted and logged."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ramakv_daemon.commit.record import ChangeRecord
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import RamAKvError
from ramakv_daemon.core.events import JsonObject, check_required
from ramakv_daemon.events.lanes import Lanes
from ramakv_daemon.events.outcome import Outcome
from ramakv_daemon.events.pipeline import Pipeline
from ramakv_daemon.handlers.messages import Message
from ramakv_daemon.ports import StoreError
from ramakv_daemon.routing.namespaces import Namespace
from ramakv_daemon.telemetry.log_text import loggable

log = logging.getLogger("ramakv")

# The loop thread's CPU one batch may take before it is committed: a client event arriving
# meanwhile waits at most about this long (a 128-hash suspend is ~0.3 ms, a 512-hash one
# ~1.5 ms; the first event of a batch is always applied, whatever it costs).
STEP_CPU_S = 0.002
# Events in one batch at most: what a read answered from committed state takes out and puts
# back while the batch's commit is under way.
MAX_BATCH = 32

# Per due event: "suspend", "close", "" (no longer idle: its condition held it back) or
# "failed" (refused, or its commit failed: the next sweep looks again).
Action = str


def action_of(o: Outcome) -> Action:
    """What an applied policy event did, from its reply data."""
    if o.type_ == "session_close":
        return "close" if o.data.get("closed") else ""
    return "suspend" if o.data.get("suspended") else ""


class BatchActor:
    """Applies a namespace's due policy events in batches, each batch in one synchronous
    step (so no read sees it before it is submitted for commit) taking at most about
    ``step_cpu_s`` of the loop's CPU, in the background lane (client events first)."""

    def __init__(
        self,
        pipeline: Pipeline,
        lanes: Lanes,
        step_cpu_s: float = STEP_CPU_S,
        max_batch: int = MAX_BATCH,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.pipeline = pipeline
        self.lanes = lanes
        self.step_cpu_s = step_cpu_s
        self.max_batch = max_batch
        self.cpu_clock = cpu_clock

    @property
    def usable(self) -> bool:
        """False on a shared store: there each event takes its session over and is fenced
        on its own (the pipeline's path)."""
        return not self.pipeline.ownership.shared

    async def act(self, ns: Namespace, payloads: Sequence[JsonObject]) -> list[Action]:
        """Every payload applied, in order, a batch per lane admission; an action each."""
        out: list[Action] = []
        while len(out) < len(payloads):
            async with self.lanes.background():
                out.extend(await self._batch(ns, payloads[len(out) :]))
        return out

    async def _batch(self, ns: Namespace, payloads: Sequence[JsonObject]) -> list[Action]:
        """Apply payloads from the first until the step's CPU or the batch size is spent,
        submit what they changed as one record, await its commit, then react to each."""
        p = self.pipeline
        actions: list[Action] = []
        writing: list[tuple[int, Outcome]] = []
        merged = Change()
        began = self.cpu_clock()
        for payload in payloads:
            if actions and (
                len(actions) >= self.max_batch or self.cpu_clock() - began >= self.step_cpu_s
            ):
                break
            o = self._apply(ns, payload)
            if o is None:
                actions.append("failed")
            elif o.change.writes:
                merged.fold(o.change)
                writing.append((len(actions), o))
                actions.append("failed")  # until its commit
            else:  # its condition held it back: traced as the pipeline does
                p.reactions.succeeded(o)
                actions.append(action_of(o))
        if not writing:
            return actions
        dispatcher = ns.dispatcher
        keep = dispatcher.keep_for(merged.prev_counts) if merged.durable else None
        record = ChangeRecord.of(
            ns.key,
            merged,
            ns.manager,
            kept=keep[1] if keep is not None else (),
            replies=[o for _, o in writing],  # their records go out at the commit, in order
            gate=keep[0] if keep is not None else None,
        )
        try:
            await p.committer.submit(record)
        except StoreError as err:  # rolled back whole: the next sweep looks again
            log.warning(
                "idle policy batch of %d events not committed (will retry): %s", len(writing), err
            )
            for _, o in writing:
                p.reactions.failed(o.type_, o.session_id, str(err), o.started)
            return actions
        for i, o in writing:
            p.reactions.succeeded(o)
            actions[i] = action_of(o)
        return actions

    def _apply(self, ns: Namespace, payload: JsonObject) -> Outcome | None:
        """One policy event applied with its trace delta taken at once; None when refused
        (counted, logged and traced as the pipeline does)."""
        p = self.pipeline
        started = time.perf_counter()
        type_ = str(payload["type"])
        sid = payload.get("session_id")
        session_id = sid if isinstance(sid, str) else None
        try:
            handler = p.registry.get(type_)
            # Typed as the pipeline's entry decodes it; else the payload, parsed by the apply.
            event: Message | JsonObject | None = handler.decode(payload, p.limits)
            if event is None:
                check_required(handler.spec, payload)
                event = payload
            apply = handler.apply
            assert apply is not None  # a policy's events change state
            change = apply(ns.ctx, event, p.clock())
            if not isinstance(change, Change):  # a sliced read: never a policy's event
                raise TypeError(f"{type_} is not a plain change")
        except (RamAKvError, ValueError, TypeError) as err:
            p.reactions.failed(type_, session_id, str(err), started)
            log.warning(
                "idle policy %s of session %s refused: %s",
                type_,
                loggable(session_id or ""),
                loggable(str(err)),
            )
            return None
        delta = p.records.delta(change, ns.key)  # before any await: this change's own
        return Outcome(type_, session_id, change, ns, handler.effects, started, None, delta)
