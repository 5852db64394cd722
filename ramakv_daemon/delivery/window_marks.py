"""What the eviction window keeps per chunk, and the bounds it keeps it by."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

# A failed call may still be acted on late by a cache that hung: its chunks stay watched
# this long (re-references in it are reported, and kept where the cache defers).
FAILED_HORIZON_S = 60.0
# A deferring cache starts its deferral when it processes the evict (after the write) and
# carries the delete out when its timer runs (later still, on a busy cache): a chunk stays
# watched this much past answer + defer_s. A keep that comes after the delete ran is
# answered ``late`` and reported, so the grace only bounds how late a silent one could be.
GRACE_MIN_S = 1.0
# The deadline sent with every deferred evict (``not_after_ns``): the cache drops a delete
# it has not carried out this long past ``generation + defer_s`` (ascend_ext's memory API
# refuses it then; the chunk stays, its LRU has it). Past the deadline plus CLOCK_MARGIN_S
# (the engine's clock against ours, and a claimed removal finishing) an evict can no longer
# act, answered or not: a new reference waits for its keep's answer or for that, no longer.
EXPIRE_AFTER_DUE_S = 1.0
CLOCK_MARGIN_S = 0.5


@dataclass(slots=True)
class Written:
    """One chunk of an evict that went out."""

    generation: int
    wrote_at: float
    until: float  # watched up to here: the answer (cache acts inline) or the defer's end
    answered: bool = False
    # After this (monotonic) a cache that honours not_after_ns can no longer act on it.
    deadline: float = float("inf")


@dataclass(slots=True)
class Keep:
    """A keep owed to the cache for a chunk referenced again inside its window."""

    generation: int
    wrote_at: float
    give_up: float  # retried until then (the cache down or hung); then given up
    # The commit of the change that referenced the chunk waits on this: resolved by the
    # cache's answer or at ``deadline`` (the evict can no longer act); cancelled only by
    # the committer's hang guard (then the commit went ahead without either).
    gate: asyncio.Future[None] | None = None
    deadline: float = float("inf")
    # Released at the deadline by a cache known to honour it: whatever the answer, the
    # delete ran before the reference was committed or never (at worst a cache miss).
    protected: bool = False
