"""The typed commands sent through the bus (a client's event, ownership's, background
work's, the DDR budget's); each names what it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.session import Session
from ramakv_daemon.pipeline.idempotency import Reply
from ramakv_daemon.ports import Claimed
from ramakv_protocol.records import BudgetBody

R = TypeVar("R", covariant=True)

# Per due idle event: "suspend", "close", "" (no longer idle: its condition held it back)
# or "failed" (refused, or its commit failed: the next sweep looks again).
Action = str


class Command(Generic[R]):
    """A state change asked of the bus, answered with an ``R``. ``client``: a client's,
    never waiting here (else background work, admitted to the background lane);
    ``settled``: its handler decides from committed state only (the bus waits for every
    change in doubt first); ``immediate``: handled at once, in no lane (a client's event
    may be waiting for it: a lane that waits for that client would never open)."""

    __slots__ = ()
    client: ClassVar[bool] = False
    settled: ClassVar[bool] = False
    immediate: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class ClientEvent(Command[Reply]):
    """One decoded request body (HTTP and in-process callers alike), answered with (HTTP
    status, response envelope)."""

    client: ClassVar[bool] = True
    payload: object


@dataclass(frozen=True, slots=True)
class BackgroundEvent(Command[Reply]):
    """One event of background work through the pipeline alone, in the background lane (a
    shared store's idle policy events: each taken over and fenced on its own), answered as
    a client's event is."""

    payload: JsonObject


@dataclass(frozen=True, slots=True)
class ExpireForks(Command[int]):
    """Release ``namespace``'s fork holds older than ``ttl_s`` as their fork_end would, as
    one change; answered with how many expired."""

    settled: ClassVar[bool] = True
    namespace: str
    ttl_s: float


@dataclass(frozen=True, slots=True)
class DeleteDead(Command[int | None]):
    """Delete up to ``limit`` of ``namespace``'s chunks dead for ``window_s``, as one change;
    answered with how many (None: none left, or its commit failed: the next pass looks)."""

    settled: ClassVar[bool] = True
    namespace: str
    window_s: float
    limit: int


@dataclass(frozen=True, slots=True)
class ActIdle(Command[list[Action]]):
    """Apply ``namespace``'s due idle-policy events from the first, as many as one loop
    step allows, as one change; answered with an action per event applied (fewer than
    given: the caller sends the rest again)."""

    namespace: str
    payloads: Sequence[JsonObject]


@dataclass(frozen=True, slots=True)
class CheckOwners(Command[int]):
    """Ask the database who owns the sessions held here (those of ``only`` when given; a
    full check also ends orphaned forks and then settles owed rows: a :class:`SettleOwed`)
    and release each one owned elsewhere or by nobody (a :class:`ReleaseSession` each);
    answered with how many were released (StoreError: none)."""

    immediate: ClassVar[bool] = True
    only: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class ReleaseSession(Command[bool]):
    """Close ``session_id`` here as a session_close would, if it is still the object
    ``seen`` when the database was asked (and nothing about it is in doubt), then end its
    forks whose rows moved with it; ``new_owner``: None when its row was deleted. Answered
    with whether it was released."""

    immediate: ClassVar[bool] = True
    session_id: str
    seen: Session
    new_owner: str | None


@dataclass(frozen=True, slots=True)
class AdoptSession(Command[bool]):
    """Adopt here the session ``claimed`` from the database for an event (its map and the
    open forks that moved with it), committed through the unit of work in order with every
    change applied before it (StoreError: undone, the row stays this node's and the
    event's retry claims it again). Answered with whether it was adopted (False: an event
    adopted it meanwhile). Immediate: the client's event that claimed it waits for it."""

    immediate: ClassVar[bool] = True
    claimed: Claimed


@dataclass(frozen=True, slots=True)
class SettleOwed(Command[int]):
    """Evict what this node's owed rows (the store's: what a takeover or an operator's
    close left this node to release) name and nothing here references, for the sessions
    it does not hold (lost while it held them not) or holds as their owner again
    (``owned``: the database said so); the rows deleted in the transaction that queues
    the evictions. Refcounts are never touched. Answered with the chunks evicted (0
    before start-up's load, or on an embedded store; StoreError: nothing settled).
    Immediate: a full check (in no lane) sends it."""

    immediate: ClassVar[bool] = True
    owned: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class DemoteOverBudget(Command[BudgetBody | None]):
    """Run ``namespace``'s DDR budget pass at ``now`` (the budget policy found one due after
    an event): whole sessions demoted in retention order, their private chunks sent to the
    cache as demotions (best effort, not stored). Answered with the pass's trace record,
    published after the event's (None: nothing to demote). Immediate: it runs inside the
    event's handling, whose lane it must not wait for."""

    immediate: ClassVar[bool] = True
    namespace: str
    now: float
