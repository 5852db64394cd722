"""list_sessions (admin): one summary row per session, filterable and paged, in slices."""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left, bisect_right
from collections.abc import Generator
from itertools import islice
from typing import ClassVar, Literal, Self

from ramakv_daemon.core.catalogue import JsonObject, Limits
from ramakv_daemon.core.change import Change
from ramakv_daemon.core.errors import InvalidEvent
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session
from ramakv_daemon.handlers.messages import Message, as_data
from ramakv_daemon.handlers.registry import READ, HandlerContext, typed_event
from ramakv_daemon.trace.protocol import shared_count
from ramakv_daemon.trace.shared_counts import GROUP, suspended_counts
from ramakv_protocol.replies import ForkRow, ListedState, ListSessionsData, SessionRow

MAX_LIMIT = 10000
MAX_OFFSET = 2**31
SLICE = 2000  # sessions filtered or ids sorted per loop iteration
# Rows are built for at most this long between two yields, GROUP at a time: an active
# map's shared_count takes 2-12 us at 512 chunks, a group's suspended maps one numpy pass.
ROW_SLICE_SECONDS = 0.003
STATES = ("active", "suspended", "closed")


def ids_field(payload: JsonObject) -> tuple[str, ...] | None:
    """The optional ``session_ids`` filter (at most MAX_LIMIT strings)."""
    ids = payload.get("session_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise InvalidEvent("'session_ids' must be a list of strings")
    ids_value(ids)
    return tuple(ids)


def ids_value(ids: tuple[str, ...] | list[str] | None) -> None:
    """Raise InvalidEvent on a ``session_ids`` filter longer than MAX_LIMIT."""
    if ids is not None and len(ids) > MAX_LIMIT:
        raise InvalidEvent(f"'session_ids' has {len(ids)} ids, more than {MAX_LIMIT}")


def int_field(payload: JsonObject, name: str, default: int, maximum: int) -> int:
    """An optional integer field from 0 to ``maximum`` (absent or null: ``default``)."""
    value = payload.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidEvent(f"'{name}' must be an integer from 0 to {maximum}")
    return int_value(value, name, maximum)


def int_value(value: int, name: str, maximum: int) -> int:
    """``value`` (an int already) in 0..``maximum``, else InvalidEvent (int_field's text)."""
    if value < 0 or value > maximum:
        raise InvalidEvent(f"'{name}' must be an integer from 0 to {maximum}")
    return value


class ListSessions(Message, frozen=True, tag="list_sessions"):
    """list_sessions' message; ``namespace`` (resolved by the pipeline, never listed as
    this event's field) says whether the event names one (else every namespace's rows)."""

    UNLISTED: ClassVar[frozenset[str]] = frozenset({"namespace"})

    state: Literal["active", "suspended", "closed"] | None = None
    limit: int = 1000
    offset: int = 0
    session_ids: tuple[str, ...] | None = None
    namespace: str | None = None

    def check(self, limits: Limits) -> None:
        int_value(self.limit, "limit", MAX_LIMIT)
        int_value(self.offset, "offset", MAX_OFFSET)
        ids_value(self.session_ids)

    @classmethod
    def parse(cls, payload: JsonObject, limits: Limits) -> Self:
        state = payload.get("state")
        if state is not None and state not in STATES:
            raise InvalidEvent('\'state\' must be "active", "suspended" or "closed"')
        limit = int_field(payload, "limit", 1000, MAX_LIMIT)
        offset = int_field(payload, "offset", 0, MAX_OFFSET)
        only = ids_field(payload)
        namespace = payload.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            # The pipeline's own words (it resolves the namespace before any handler).
            raise InvalidEvent("'namespace' must be a string")
        return cls(state, limit, offset, only, namespace)


@typed_event(
    ListSessions,
    "Admin: list sessions (id, state, turn_count, chunk_count, shared_count, fork_holds, "
    "forks with fork_id and age_s, last_event_ts), sorted by id; session_ids keeps only "
    'those; a closed session with open forks is listed with state "closed"; every '
    "namespace unless the event names one (rows outside the unnamed default namespace "
    "carry 'namespace')",
    effects=READ,
)
def list_sessions(
    ctx: HandlerContext, msg: ListSessions, now: float
) -> Generator[None, None, Change]:
    """A sliced read: the sessions are copied at the first step (immutable values: the
    state of that moment); filtering, sorting (runs merged lazily) and the rows follow a
    slice per loop iteration (one sort of 20k ids stalled the loop ~6 ms)."""
    state, limit, offset = msg.state, msg.limit, msg.offset
    only = set(msg.session_ids) if msg.session_ids is not None else None
    if msg.namespace is not None:
        managers = [ctx.manager]
    else:
        managers = list(ctx.every().values())
    # The snapshot (sessions and forks are immutable values): the state of this moment,
    # taken at C speed (a tuple a session built in Python took ~50 ms at 50,000): each
    # namespace's sessions and forks by parent copied, each id -> its namespace's view.
    views: list[tuple[SessionManager, dict[str, Session], dict[str, list[Fork]]]] = []
    where: dict[str, int] = {}
    for i, m in enumerate(managers):
        forks = {sid: list(m.forks.of(sid)) for sid in m.forks.parents()}
        sessions = dict(m.sessions) if only is None else dict(_picked(m.sessions, only))
        views.append((m, sessions, forks))
        # Closed parents first: a live session overrides.
        where.update(dict.fromkeys((p for p in forks if only is None or p in only), i))
        where.update(dict.fromkeys(sessions, i))
    yield
    ids = list(where)
    runs: list[list[str]] = []
    for start in range(0, len(ids), SLICE):
        part = ids[start : start + SLICE]
        if state is not None:
            part = [sid for sid in part if _state(views[where[sid]][1].get(sid)) == state]
        runs.append(sorted(part))
        yield
    total = sum(map(len, runs))
    rows: list[SessionRow] = []
    merged = heapq.merge(*_without_smallest(runs, min(offset, total)))
    deadline = time.perf_counter() + ROW_SLICE_SECONDS
    left = limit
    while left:
        page = list(islice(merged, min(left, GROUP)))
        if not page:
            break
        left -= len(page)
        if time.perf_counter() > deadline:
            yield
            deadline = time.perf_counter() + ROW_SLICE_SECONDS
        # As of the slice that builds the row (the trace's summaries are as of their
        # record): the group's suspended maps counted in one numpy pass.
        group = [_held(views[where[sid]], sid) for sid in page]
        known = _bulk_counts(group)
        for i, sid in enumerate(page):
            rows.append(_row(ctx, sid, _state(group[i][1]), group[i], known.get(i), now))
    data: ListSessionsData = {"total": total, "sessions": rows}
    return Change(data=as_data(data))


def _held(
    view: tuple[SessionManager, dict[str, Session], dict[str, list[Fork]]], sid: str
) -> tuple[SessionManager, Session | None, list[Fork]]:
    """A row's namespace, session (None: a closed parent) and open forks."""
    m, sessions, forks = view
    return m, sessions.get(sid), forks.get(sid, [])


def _without_smallest(runs: list[list[str]], k: int) -> list[list[str]]:
    """The sorted ``runs`` of distinct ids less the ``k`` smallest ids of them all.

    The k-th id is found by bisecting the runs (a pivot from the widest window, its rank
    the sum of one bisect a run), a few thousand bisects: merging past an offset of
    25,000 cost ~20 ms at 50,000 sessions.
    """
    if k <= 0:
        return runs
    lo = [0] * len(runs)
    hi = [len(r) for r in runs]
    while any(a < b for a, b in zip(lo, hi, strict=True)):
        j = max(range(len(runs)), key=lambda i: hi[i] - lo[i])
        pivot = runs[j][(lo[j] + hi[j]) // 2]
        below = [bisect_left(r, pivot) for r in runs]
        rank = sum(below)
        if rank == k:
            return [r[b:] for r, b in zip(runs, below, strict=True)]
        if rank < k:  # the k-th id is above the pivot
            lo = [max(a, bisect_right(r, pivot)) for a, r in zip(lo, runs, strict=True)]
        else:
            hi = [min(a, b) for a, b in zip(hi, below, strict=True)]
    return []  # k is the number of ids or more


def _state(s: Session | None) -> ListedState:
    """A row's state: a closed parent (no session, open forks) is "closed"."""
    return s.state if s is not None else "closed"


def _picked(sessions: dict[str, Session], only: set[str]) -> list[tuple[str, Session]]:
    """The sessions named in ``only`` that exist."""
    return [(sid, s) for sid in only if (s := sessions.get(sid)) is not None]


def _bulk_counts(held: list[tuple[SessionManager, Session | None, list[Fork]]]) -> dict[int, int]:
    """Index -> shared_count of the suspended packed sessions among ``held``, counted a
    namespace at a time (trace.shared_counts.suspended_counts)."""
    known: dict[int, int] = {}
    for m in {id(m): m for m, _, _ in held}.values():
        mine = [i for i, h in enumerate(held) if h[0] is m]
        lives = [held[i][1] for i in mine]
        forks = {s.session_id: f for _, s, f in (held[i] for i in mine) if s is not None}
        found = suspended_counts(lives, m.refcounts.counts, forks)
        known.update((mine[j], n) for j, n in found.items())
    return known


def _row(
    ctx: HandlerContext,
    sid: str,
    state: ListedState,
    held: tuple[SessionManager, Session | None, list[Fork]],
    known: int | None,
    now: float,
) -> SessionRow:
    """One session's row; ``known``: its shared_count, counted in bulk already."""
    m, live, forks = held
    namespace = m.namespace
    table = m.refcounts
    shared = 0
    if live is not None:
        shared = (
            known if known is not None else shared_count(live, table.counts, forks, table.shared)
        )
    forks_rows: list[ForkRow] = [
        {
            "fork_id": f.fork_id,
            "created_ts": f.created_ts,
            "age_s": round(f.age(now), 3),
            "chunk_count": len(f.hashes),
        }
        for f in forks
    ]
    row: SessionRow = {
        "session_id": sid,
        "state": state,
        "turn_count": live.turn_count if live else 0,
        "chunk_count": len(live.chunk_hashes) if live else 0,
        "shared_count": shared,
        "fork_holds": len(forks),
        "forks": forks_rows,
        "last_event_ts": live.last_event_ts if live else 0.0,
    }
    if namespace:
        row["namespace"] = namespace
    if ctx.node_id:  # a shared store: the node that owns it (this one)
        row["owner"] = ctx.node_id
    return row
