"""Cost model: chunk size, SSD bandwidth, DDR read and prefill cost, with sources or assumptions."""

from __future__ import annotations

from dataclasses import dataclass

# Model: Qwen2.5-7B-Instruct (Hugging Face config.json: num_hidden_layers=28,
# num_key_value_heads=4, head_dim=128 (hidden 3584 / 28 heads), bf16 KV).
# KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x 2 bytes.
LAYERS, KV_HEADS, HEAD_DIM, DTYPE_BYTES = 28, 4, 128, 2
KV_BYTES_PER_TOKEN = 2 * LAYERS * KV_HEADS * HEAD_DIM * DTYPE_BYTES  # 57,344 B

# LMCache's default chunk_size is 256 tokens (LMCache docs, configuration: chunk_size).
CHUNK_TOKENS = 256


@dataclass(frozen=True, slots=True)
class CostModel:
    """Per-chunk costs that turn chunk counts into a modelled time to first token.

    Attributes:
        chunk_bytes: KV bytes of one 256-token chunk.
        ssd_bytes_per_s: read bandwidth of the one SSD queue that prefetches and demand
            loads share. Source: a single PCIe Gen4 x4 NVMe drive is specified at about
            7 GB/s sequential read (e.g. Samsung 990 PRO datasheet: 7,450 MB/s);
            ASSUMPTION: 6 GB/s effective through LMCache's local-disk backend (large
            sequential reads of 14 MiB files, O_DIRECT-like behaviour).
        ddr_bytes_per_s: host DDR -> accelerator copy bandwidth. Source: PCIe Gen4 x16 is
            32 GB/s raw per direction; ASSUMPTION: 25 GB/s effective for pinned-memory
            copies (LMCache reports copies of this order on PCIe Gen4 hosts).
        prefill_tokens_per_s: prefill throughput for a 7B model on one accelerator.
            ASSUMPTION: 8,000 tokens/s, i.e. ~2 x 7.6e9 FLOP/token at ~120 TFLOP/s
            effective (~40% of the ~300 TFLOP/s FP16/BF16 dense peak of an A100 or an
            Ascend 910B). The attention term that grows with context is ignored
            (it would make recomputation dearer, never cheaper).
        decode_s_per_token: time per output token under batching (ASSUMPTION: 25 ms);
            used only to place turn_end after the request in the workload.
    Loads and compute are added, not overlapped (ASSUMPTION, conservative for both
    policies: CachedAttention-style layer-wise pipelining would hide part of the DDR
    read, equally for both).
    """

    chunk_bytes: int = KV_BYTES_PER_TOKEN * CHUNK_TOKENS
    ssd_bytes_per_s: float = 6e9
    ddr_bytes_per_s: float = 25e9
    prefill_tokens_per_s: float = 8000.0
    decode_s_per_token: float = 0.025

    @property
    def ssd_chunk_s(self) -> float:
        """Seconds the SSD queue is busy reading one chunk."""
        return self.chunk_bytes / self.ssd_bytes_per_s

    @property
    def ddr_chunk_s(self) -> float:
        """Seconds to copy one chunk from DDR to the accelerator."""
        return self.chunk_bytes / self.ddr_bytes_per_s

    @property
    def prefill_chunk_s(self) -> float:
        """Seconds to recompute (prefill) one chunk."""
        return CHUNK_TOKENS / self.prefill_tokens_per_s

    def ttft(self, ddr: int, ssd: int, recompute: int, new_tokens: int, wait_s: float) -> float:
        """Modelled time to first token of one request.

        Args:
            ddr: reused chunks served from DDR.
            ssd: reused chunks loaded from SSD on the critical path (they are then read
                from DDR too).
            recompute: reused chunks found in no tier, prefilled again.
            new_tokens: tokens never seen before (prefilled under any policy).
            wait_s: time the request waited for its SSD loads (queueing + transfer).
        """
        return (
            wait_s
            + (ddr + ssd) * self.ddr_chunk_s
            + recompute * self.prefill_chunk_s
            + new_tokens / self.prefill_tokens_per_s
        )

    def describe(self) -> dict[str, float]:
        """The per-chunk figures, for the report."""
        return {
            "chunk_mib": self.chunk_bytes / 2**20,
            "ssd_chunk_ms": self.ssd_chunk_s * 1000,
            "ddr_chunk_ms": self.ddr_chunk_s * 1000,
            "prefill_chunk_ms": self.prefill_chunk_s * 1000,
        }
