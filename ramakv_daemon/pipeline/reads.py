"""Applying an event while commits are in flight: reads answer from committed state
(sliced if large), refusals wait for the changes in doubt."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Mapping
from contextlib import ExitStack

from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import RamAKvError
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.handlers.registry import ApplyFn, Effects, HandlerContext
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork
from ramakv_protocol import records

Result = Change | Generator[None, None, Change]
Delta = records.Delta  # a trace record's "delta": sessions, refcounts (and forks)


def empty_delta() -> Delta:
    """The delta of an event that changed nothing."""
    return {"sessions": {}, "refcounts": {}}


async def apply_settled(
    effects: Effects,
    apply: ApplyFn,
    payload: object,
    ctx: HandlerContext,
    managers: Mapping[str, SessionManager],
    uow: UnitOfWork,
    delta: Callable[[Change], Delta],
    clock: Callable[[], float],
) -> tuple[Change, Delta | None]:
    """Apply a handler; a read or a refusal never answers from a change still in doubt.
    Returns the change and, for a read, the trace delta it answered from (else None: the
    caller takes it, before any await).

    A read while changes wait for their commit answers the committed state
    (:func:`read_committed`). A write refused while changes are in doubt could be
    contradicted by their rollback: wait for them, then apply again (a refusal changed
    nothing, so applying again is safe).
    """
    busy = uow.busy
    if busy and effects.reads:
        return await read_committed(
            apply, payload, ctx, managers, uow, delta, clock(), effects.reads_chunks
        )
    try:
        change = apply(ctx, payload, clock())
    except RamAKvError:
        if not busy:
            raise
        await uow.settled()
        # Only a plain handler refuses here (a sliced read raises in its steps); the rare
        # retry goes through the slice runner for the types' sake.
        return await finish_read(first_step(apply(ctx, payload, clock())))
    if isinstance(change, Generator):  # a sliced read: its slices run over several steps
        return await finish_read(first_step(change))
    if busy and not change.writes:
        await uow.settled()
        change = apply(ctx, payload, clock())
        if isinstance(change, Generator):
            return await finish_read(first_step(change))
    return change, None


async def read_committed(
    apply: ApplyFn,
    payload: object,
    ctx: HandlerContext,
    managers: Mapping[str, SessionManager],
    uow: UnitOfWork,
    delta: Callable[[Change], Delta],
    now: float,
    chunks: bool = True,
) -> tuple[Change, Delta | None]:
    """A read answered from committed state: every namespace's uncommitted changes are
    taken out for the (synchronous) apply and put back after it, so the answer is the one
    a reader would get if every change in doubt were rolled back — and it is also right
    when they commit, because none of them is acknowledged yet. A sliced read takes its
    snapshot inside; its slices run after. ``chunks`` False: the read looks at sessions
    and forks only, so the chunk tables are left as they are (Effects.reads_chunks)."""
    taken: Delta | None = None
    with ExitStack() as stack:
        for key, manager in managers.items():
            pending = uow.uncommitted(key)
            if pending:
                stack.enter_context(manager.as_committed(pending, chunks))
        result = first_step(apply(ctx, payload, now))  # may raise: the answer
        if not isinstance(result, Generator):
            taken = delta(result)
    change, sliced = await finish_read(result)
    return change, taken if taken is not None else sliced


def first_step(result: Result) -> Result:
    """A sliced read (a generator) run to its first yield, where it took its snapshot;
    the change itself when there is nothing more to run."""
    if not isinstance(result, Generator):
        return result
    try:
        next(result)
    except StopIteration as done:
        return done.value
    return result


async def finish_read(result: Result) -> tuple[Change, Delta | None]:
    """A plain change as is (no delta yet); a sliced read run to its end, one slice per
    loop iteration so other events run in between (its first step, the snapshot, has
    run), with an empty delta (it changed nothing)."""
    while isinstance(result, Generator):
        await asyncio.sleep(0)
        try:
            next(result)
        except StopIteration as done:
            change: Change = done.value
            return change, empty_delta()
    return result, None
