"""What one LRU of the disk tier's size would recompute on the engine schedule (no engine).

LMCache's disk tier keeps a copy of every chunk, so with no steering its hits are those of
one LRU of ``disk_chunks``; steering also deletes a closed session's own chunks. The real
benchmark matched this model to the token on the shape before this one, so it checks a
shape's intent in a second: LRU should recompute well above the floor, steering at it.
"""

from __future__ import annotations

from collections import OrderedDict

from ascend_ext.hashing import chain_hashes_hex
from bench.engine_workload import CLOSE, TURN, Step

CHUNK = 256


def lru_recomputed(steps: list[Step], capacity: int, drop_closed: bool) -> int:
    """Prompt tokens recomputed with one LRU of ``capacity`` chunks (lookup is a prefix)."""
    return sum(lru_turns(steps, capacity, drop_closed))


def lru_turns(steps: list[Step], capacity: int, drop_closed: bool) -> list[int]:
    """Each turn's recomputed prompt tokens with one LRU of ``capacity`` chunks."""
    turns: list[int] = []
    lru: OrderedDict[str, None] = OrderedDict()
    owners: dict[str, set[str]] = {}
    mine: dict[str, set[str]] = {}
    for step in steps:
        if step.kind == CLOSE and drop_closed:
            for h in mine.pop(step.session, set()):
                owners[h].discard(step.session)
                if not owners[h]:  # the shared system prompt stays while anyone holds it
                    lru.pop(h, None)
            continue
        if step.kind != TURN:
            continue
        hashes = chain_hashes_hex(step.prompt, CHUNK, False)
        hit = 0
        while hit < len(hashes) and hashes[hit] in lru:
            hit += 1
        turns.append(len(step.prompt) - hit * CHUNK)
        for h in hashes:
            lru[h] = None
            lru.move_to_end(h)
            owners.setdefault(h, set()).add(step.session)
            mine.setdefault(step.session, set()).add(h)
        while len(lru) > capacity:
            lru.popitem(last=False)
    return turns


def differing_turns(steps: list[Step], capacity: int) -> int:
    """Turns whose recompute differs between plain LRU and LRU that drops closed sessions'
    chunks: the turns where the tiers' policy decides anything."""
    plain = lru_turns(steps, capacity, drop_closed=False)
    steered = lru_turns(steps, capacity, drop_closed=True)
    return sum(a != b for a, b in zip(plain, steered, strict=True))


def live_chunks_peak(steps: list[Step]) -> int:
    """The most distinct chunks the open sessions' contexts hold at once."""
    open_: dict[str, set[str]] = {}
    peak = 0
    for step in steps:
        if step.kind == CLOSE:
            open_.pop(step.session, None)
        elif step.kind == TURN:
            open_[step.session] = set(chain_hashes_hex(step.prompt, CHUNK, False))
            peak = max(peak, len(set().union(*open_.values())))
    return peak
