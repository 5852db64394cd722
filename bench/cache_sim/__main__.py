"""`python -m bench.cache_sim [--quick]`: run the suite, print the table, write JSON and PNGs."""

from __future__ import annotations

import argparse
import json
import os

from bench.cache_sim.suite import run, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="5 simulated minutes, fewer variants")
    ap.add_argument("--out", default="bench/results", help="directory for JSON and PNGs")
    ap.add_argument("--workers", type=int, default=None, help="processes (default: up to 2)")
    args = ap.parse_args()
    result = run(quick=args.quick, out_dir=args.out, workers=args.workers)
    print(table(result))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "cache.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(f"wrote {path} and {', '.join(result.get('plots', []))}")


if __name__ == "__main__":
    main()
