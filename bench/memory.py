"""Memory held by the daemon's state: bytes per chunk reference and per distinct chunk."""

from __future__ import annotations

import gc
import json
import tracemalloc

from bench.dataset import session_maps
from ramakv_daemon.core.catalogue import Limits, chunk_hashes_of
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.packed import text_for_store

TURNS = 4  # each map reaches its full length over this many growing turn_ends


def measure(n_sessions: int = 10000, chunks: int = 512, turns: int = TURNS) -> dict:
    """Feed every map through the live turn_end path (JSON decode, validation), growing
    over ``turns`` turns as an agent's context does, and count what the manager keeps;
    input buffers are freed before measuring."""
    maps = session_maps(n_sessions, chunks)
    blobs = [
        [json.dumps(m[: len(m) * (t + 1) // turns]).encode() for t in range(turns)] for m in maps
    ]
    del maps
    limits = Limits(max_hashes_per_event=max(1000, chunks))
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    m = SessionManager()
    for t in range(turns):
        for i, per_turn in enumerate(blobs):
            change = m.turn_end(f"sess-{i}", chunk_hashes_of(json.loads(per_turn[t]), limits))
            # What the committer's store write does to each new map (core.packed
            # .text_for_store); the newest maps keep their strings (core.packed.KeptText,
            # up to 64 Ki hashes), which this count includes.
            for s in change.prev_sessions:
                text_for_store(m.sessions[s].chunk_hashes)
    del blobs
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    refs = m.refcounts.total_references()
    distinct = len(m.refcounts)
    return {
        "sessions": n_sessions,
        "hashes_per_session": chunks,
        "turns": turns,
        "references": refs,
        "distinct_chunks": distinct,
        "bytes": held,
        "bytes_per_reference": held / refs,
        "bytes_per_distinct_chunk": held / distinct,
    }


def table(res: dict) -> str:
    """One-line Markdown table."""
    return (
        "| sessions x hashes (turns) | references | distinct | MiB | B/reference "
        "| B/distinct |\n"
        "|---|---|---|---|---|---|\n"
        f"| {res['sessions']} x {res['hashes_per_session']} ({res.get('turns', 1)}) | "
        f"{res['references']} | "
        f"{res['distinct_chunks']} | {res['bytes'] / 2**20:.0f} | "
        f"{res['bytes_per_reference']:.1f} | {res['bytes_per_distinct_chunk']:.1f} |"
    )


if __name__ == "__main__":
    print(table(measure(2000)))
