"""Each session's shared_count as last computed, so snapshots need not recompute them.

Computing one costs a refcount lookup per chunk of the map (memory-bound: at 50,000 x 512
about 7 s for all). The value is taken whenever a session's summary is built (every delta),
and once for every stored session in the background after start-up, in slices.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.trace.protocol import shared_count

SLICE_SECONDS = 0.003


class SharedCounts:
    """(namespace, session id) -> shared_count."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], int] = {}

    def get(self, namespace: str, sid: str) -> int | None:
        """The last computed value, or None."""
        return self.values.get((namespace, sid))

    def put(self, namespace: str, sid: str, value: int | None) -> None:
        """Remember a value (None: the session is gone)."""
        if value is None:
            self.values.pop((namespace, sid), None)
        else:
            self.values[(namespace, sid)] = value

    async def warm(self, managers: Mapping[str, SessionManager]) -> int:
        """Compute the value of every session that has none yet, a few ms at a time;
        returns how many were computed."""
        done = 0
        deadline = time.perf_counter() + SLICE_SECONDS
        for key, m in list(managers.items()):
            counts = m.refcounts.counts
            for i, (sid, s) in enumerate(list(m.sessions.items())):
                if (key, sid) not in self.values and m.sessions.get(sid) is s:
                    self.values[(key, sid)] = shared_count(s, counts, m.forks.of(sid))
                    done += 1
                if i % 8 == 7 and time.perf_counter() > deadline:
                    await asyncio.sleep(0)
                    deadline = time.perf_counter() + SLICE_SECONDS
        return done
