"""Instructions per turn_end of Daemon.handle, counted by valgrind: a per-event cost that the
machine's noise does not move (bench.service_cpu's CPU time moves ±20 % between runs here).

``python -m bench.service_instructions [--engine-hashes] [CHECKOUT ...]``: for this checkout
and each CHECKOUT (an older commit's tree, e.g. from ``git worktree add``), runs the
throughput benchmark's turn_end bodies through a real service and SQLite file under
``valgrind --tool=cachegrind`` twice, with 3,200 and 6,400 events after the warm-up, and
prints the slope: the instructions of 3,200 events over 3,200. The bodies are made before
either run (the same for both), so the slope holds the events alone. Hash seeds are fixed
(PYTHONHASHSEED=0): two runs of one tree agree to within 0.01 %. ``--engine-hashes`` spells
each hash as the engine does (packed maps) in every checkout, whether or not its own
bench.service_cpu knows the flag. Each checkout takes ~2 minutes on this machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL, LARGE = 6400, 9600  # bodies: a warm-up of 3,200, then 3,200 or 6,400 measured

# Runs inside the checkout under test: its own bench.service_cpu.measure, fed bodies made
# up front so that the two sizes differ by the measured events alone.
DRIVER = """
import asyncio, hashlib, sys
import orjson
import bench.service_cpu as sc
events, engine, most = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
def spelled(body):
    event = orjson.loads(body)
    params = event["kv_transfer_params"]
    params["chunk_hashes"] = [
        format(int.from_bytes(hashlib.blake2b(h.encode(), digest_size=8).digest(), "little",
                              signed=True), "x")
        for h in params["chunk_hashes"]
    ]
    return orjson.dumps(event)
bodies = {}
for k in range(most // sc.CONCURRENCY):
    for w in range(sc.CONCURRENCY):
        b = sc.turn_end_body(w * 1_000_000 + k)
        bodies[w * 1_000_000 + k] = spelled(b) if engine else b
sc.turn_end_body = bodies.__getitem__
asyncio.run(sc.measure(events, False))
"""


def instructions(root: Path, events: int, engine: bool) -> int:
    """Instructions valgrind counts for one driver run of ``events`` bodies in ``root``."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(root)}
    args = [sys.executable, "-c", DRIVER, str(events), "1" if engine else "0", str(LARGE)]
    out = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
        + args,
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise RuntimeError(f"valgrind run in {root} failed: {out.stderr[-1500:]}")
    return int(found.group(1).replace(",", ""))


def per_event(root: Path, engine: bool) -> float:
    """Instructions per turn_end in ``root``: the slope between the two sizes."""
    small = instructions(root, SMALL, engine)
    large = instructions(root, LARGE, engine)
    return (large - small) / (LARGE - SMALL)


def main() -> None:
    """Print instructions per turn_end for this checkout and each one named."""
    if shutil.which("valgrind") is None:
        sys.exit("bench.service_instructions needs valgrind (apt-get install valgrind)")
    engine = "--engine-hashes" in sys.argv
    roots = [ROOT] + [Path(a).resolve() for a in sys.argv[1:] if not a.startswith("--")]
    spelled = "engine-spelled hashes (packed maps)" if engine else "hashes spelled as names"
    print(f"instructions per turn_end, {spelled}, slope of {SMALL}/{LARGE} bodies:")
    mine = None
    for root in roots:
        print(f"  measuring {root} (two valgrind runs) ...", file=sys.stderr, flush=True)
        n = per_event(root, engine)
        mine = n if mine is None else mine
        print(f"  {root}: {n:,.0f}  (this checkout ÷ it: {mine / n:.3f})", flush=True)


if __name__ == "__main__":
    main()
