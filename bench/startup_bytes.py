"""Where a loaded store's bytes go: `python -m bench.startup_bytes STORE` loads a copy as the
daemon does (SQLite store, then the manager) and prints one JSON line of sizes."""

from __future__ import annotations

import asyncio
import gc
import json
import resource
import shutil
import sys
import tempfile
from pathlib import Path

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.core.count_table import CountTable
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.packed import PackedMap


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def measure(store: Path) -> dict[str, float]:
    import aiohttp.web  # noqa: F401 - the daemon's own imports are in its baseline
    import numpy  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="ramakv-bytes-", dir=store.parent) as d:
        work = Path(d) / "s.db"
        shutil.copy(store, work)
        base = rss_mib()
        st = SqliteSessionStore(str(work))
        await st.open()
        try:
            m = SessionManager()
            m.load(await st.load_all())
        finally:
            await st.close()
        gc.collect()
        after = rss_mib()
    refs = sum(len(s.chunk_hashes) for s in m.sessions.values())
    maps = sum(
        len(s.chunk_hashes.codes)
        for s in m.sessions.values()
        if isinstance(s.chunk_hashes, PackedMap)
    )
    table = m.refcounts.counts
    arrays = 0
    if isinstance(table, CountTable):
        keys, counts = table.arrays
        arrays = memoryview(keys).nbytes + memoryview(counts).nbytes  # type: ignore[arg-type]
    mib = 2**20
    return {
        "sessions": len(m.sessions),
        "references": refs,
        "baseline_mib": base,
        "loaded_mib": after,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "maps_mib": maps / mib,
        "maps_b_per_ref": maps / refs,
        "table_mib": arrays / mib,
        "table_b_per_ref": arrays / refs,
        "rest_mib": (after - base) - (maps + arrays) / mib,
        "b_per_ref": (after - base) * mib / refs,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(Path(sys.argv[1])))))
