"""The devserver's stand-in for inference: look a prompt's chunks up, load or compute them."""

from __future__ import annotations

from typing import Any

from ascend_ext.memory_ops import CPU, DISK, MemoryOps


def hex_hash(chunk_hash: int) -> str:
    """Signed hex, as LMCache-Ascend reports chunk hashes ("-6ed9a448787a198f")."""
    return format(chunk_hash, "x")


def chunk_payload(chunk_hash: int, shape: tuple[int, ...]) -> Any:
    """Deterministic KV bytes for a chunk, so a load can be checked against what was stored."""
    import torch

    gen = torch.Generator().manual_seed(chunk_hash & 0x7FFF_FFFF_FFFF_FFFF)
    return torch.randn(shape, generator=gen).to(torch.float16)


def run_turn(ops: MemoryOps, token_ids: list[int]) -> dict:
    """Serve one prompt: each full chunk comes from DDR, disk, or is computed and stored."""
    return ops.run_serial(_turn, ops, token_ids)


def _turn(ops: MemoryOps, token_ids: list[int]) -> dict:
    """Runs on the MemoryOps worker thread, so it never interleaves with evict/prefetch."""
    import torch

    engine, sm = ops.engine, ops.sm
    size = engine.config.chunk_size
    full = len(token_ids) - len(token_ids) % size  # partial tail chunks are not saved
    shape = tuple(engine.metadata.kv_shape)
    hashes: list[str] = []
    served: list[str] = []
    bytes_ok = True
    new_keys, new_objs = [], []
    tokens = torch.tensor(token_ids[:full], dtype=torch.long)
    for _start, _end, key in engine.token_database.process_tokens(tokens) if full else []:
        hashes.append(hex_hash(key.chunk_hash))
        where = _where(sm, key)
        if where is not None:
            obj = sm.get(key, location=where)  # from disk, 0.5.6 also writes it into DDR
            if obj is None:
                where = None
            else:
                bytes_ok &= bool(torch.equal(obj.tensor, chunk_payload(key.chunk_hash, shape)))
                obj.ref_count_down()
                served.append("ddr" if where == CPU else "disk")
                continue
        served.append("computed")
        obj = sm.allocate(torch.Size(shape), torch.float16, eviction=True, busy_loop=False)
        if obj is None:  # DDR full of pinned chunks: serve it uncached, like a real engine
            continue
        obj.tensor.copy_(chunk_payload(key.chunk_hash, shape))
        new_keys.append(key)
        new_objs.append(obj)
    if new_keys:
        sm.batched_put(new_keys, new_objs)  # consumes our references
    return {
        "kv_transfer_params": {"chunk_hashes": hashes},
        "served": served,
        "bytes_ok": bytes_ok,
        "tail_tokens": len(token_ids) - full,
    }


def _where(sm: Any, key: Any) -> str | None:
    """The first tier holding the chunk (DDR before disk)."""
    for name in (CPU, DISK):
        backend = sm.storage_backends.get(name)
        if backend is not None and backend.contains(key, pin=False):
            return name
    return None
