"""ascend_ext's CPU KV copy per chunk: per-block slice copies against the per-token gather.

    python -m bench.kv_copy [--hidden 1024 --layers 4 --heads 16]

One 256-token chunk of the benchmark's model between a vLLM-CPU layer layout and a KV_2LTD
memory object, both ways, each the median of many runs; ``indexed_*`` is the copy ascend_ext
used before (advanced indexing, one gather/scatter of every token per layer), kept here as
the reference the tests compare the new copy with byte for byte.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace
from typing import Any

import torch

from ascend_ext.cpu_kv import VLLMCpuKVConnector
from ascend_ext_dev.tiny_model import COMPUTE, ModelShape

BLOCK_SIZE = 128  # vLLM-CPU 0.32's default block size for this model


def indexed_from_gpu(
    layers: list[torch.Tensor], dst: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor
) -> None:
    """The previous store: per-layer gather of every token's K and V."""
    for i, layer in enumerate(layers):
        blocks, heads, block_size, two_d = layer.shape
        both = layer.view(blocks, heads, 2, block_size, two_d // 2)
        k, v = both[:, :, 0], both[:, :, 1]
        block, off = slots // block_size, slots % block_size
        dst[0, i, pos] = k[block, :, off].reshape(len(pos), -1).to(dst.dtype)
        dst[1, i, pos] = v[block, :, off].reshape(len(pos), -1).to(dst.dtype)


def indexed_to_gpu(
    layers: list[torch.Tensor], src: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor
) -> None:
    """The previous load: per-layer scatter of every token's K and V."""
    for i, layer in enumerate(layers):
        blocks, heads, block_size, two_d = layer.shape
        both = layer.view(blocks, heads, 2, block_size, two_d // 2)
        k, v = both[:, :, 0], both[:, :, 1]
        block, off = slots // block_size, slots % block_size
        shape = (len(pos), heads, two_d // 2)
        k[block, :, off] = src[0, i, pos].reshape(shape).to(k.dtype)
        v[block, :, off] = src[1, i, pos].reshape(shape).to(v.dtype)


def _median_ms(fn: Any, runs: int) -> float:
    fn()  # warm
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 3)


def measure(shape: ModelShape = COMPUTE, chunk: int = 256, runs: int = 50) -> dict[str, Any]:
    """Load and store of one chunk, per-block copy against the indexed one (ms, median)."""
    blocks = 64
    gen = torch.Generator().manual_seed(1)
    layers = [
        torch.randn(blocks, shape.heads, BLOCK_SIZE, 2 * shape.head_dim, generator=gen).to(
            torch.bfloat16
        )
        for _ in range(shape.layers)
    ]
    obj = SimpleNamespace(
        tensor=torch.zeros(2, shape.layers, chunk, shape.hidden, dtype=torch.bfloat16),
        metadata=SimpleNamespace(fmt=None),
    )
    # vLLM hands a request blocks from its free list: consecutive inside a block, anywhere.
    order = torch.randperm(blocks, generator=gen)[: chunk // BLOCK_SIZE]
    slots = (order[:, None] * BLOCK_SIZE + torch.arange(BLOCK_SIZE)).flatten()
    pos = torch.arange(chunk)
    conn = VLLMCpuKVConnector(shape.layers, shape.heads, shape.head_dim)
    kw = {"kvcaches": layers, "slot_mapping": slots}
    res = {
        "shape": shape.label(),
        "chunk_mib": shape.chunk_mib(chunk),
        "load_indexed_ms": _median_ms(lambda: indexed_to_gpu(layers, obj.tensor, pos, slots), runs),
        "load_per_block_ms": _median_ms(lambda: conn.to_gpu(obj, 0, chunk, **kw), runs),
        "store_indexed_ms": _median_ms(
            lambda: indexed_from_gpu(layers, obj.tensor, pos, slots), runs
        ),
        "store_per_block_ms": _median_ms(lambda: conn.from_gpu(obj, 0, chunk, **kw), runs),
    }
    res["load_speedup"] = round(res["load_indexed_ms"] / res["load_per_block_ms"], 2)
    res["store_speedup"] = round(res["store_indexed_ms"] / res["store_per_block_ms"], 2)
    return res


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.kv_copy")
    p.add_argument("--hidden", type=int, default=COMPUTE.hidden)
    p.add_argument("--layers", type=int, default=COMPUTE.layers)
    p.add_argument("--heads", type=int, default=COMPUTE.heads)
    p.add_argument("--runs", type=int, default=50)
    a = p.parse_args()
    shape = ModelShape(hidden=a.hidden, layers=a.layers, heads=a.heads, intermediate=a.hidden)
    print(json.dumps(measure(shape, runs=a.runs), indent=1))


if __name__ == "__main__":
    main()
