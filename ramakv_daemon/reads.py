"""Reads while commits are in flight: answered from committed state, sliced if large."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Mapping
from contextlib import ExitStack
from typing import Any

from ramakv_daemon.committer import GroupCommitter
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import RamAKvError
from ramakv_daemon.core.manager import SessionManager

# Events that only read state (turn_start also refreshes last_event_ts and prefetches):
# while commits are in flight they answer from committed state.
READ_EVENTS = frozenset(
    {
        "session_map",
        "health",
        "list_sessions",
        "chunk_info",
        "list_events",
        "list_namespaces",
        "turn_start",
    }
)
READS_WITH_EFFECT = frozenset({"turn_start"})

Result = Change | Generator[None, None, Change]


async def read_committed(
    type_: str,
    apply: Any,
    payload: dict[str, Any],
    ns: Any,
    managers: Mapping[str, SessionManager],
    committer: GroupCommitter,
    delta: Callable[[Change], dict[str, Any]],
    now: float,
) -> Change:
    """A read answered from committed state: every namespace's uncommitted changes are
    taken out for the (synchronous) apply and put back after it, so the answer is the one
    a reader would get if every change in doubt were rolled back — and it is also right
    when they commit, because none of them is acknowledged yet. A sliced read takes its
    snapshot inside; its slices run after."""
    if type_ in READS_WITH_EFFECT:
        # turn_start's advisory last_event_ts and its prefetch apply to the live state.
        try:
            apply(ns.ctx, payload, now)
        except RamAKvError:
            pass
    with ExitStack() as stack:
        for key, manager in managers.items():
            pending = committer.uncommitted(key)
            if pending:
                stack.enter_context(manager.as_committed(pending))
        result = first_step(apply(ns.ctx, payload, now))  # may raise: the answer
        if not isinstance(result, Generator):
            result.notes["_delta"] = delta(result)
    change = await finish_read(result)
    change.namespace = ns.key
    return change


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


async def finish_read(result: Result) -> Change:
    """A plain change as is; a sliced read run to its end, one slice per loop iteration
    so other events run in between (its first step, the snapshot, has run)."""
    while isinstance(result, Generator):
        await asyncio.sleep(0)
        try:
            next(result)
        except StopIteration as done:
            change: Change = done.value
            change.notes.setdefault("_delta", {"sessions": {}, "refcounts": {}})
            return change
    return result
