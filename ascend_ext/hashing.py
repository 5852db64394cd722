"""Deterministic blake3 chain hashing of token chunks, the chunk ids the host receives."""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import blake3

#: Name under which install() registers the algorithm as lmcache's
#: ``pre_caching_hash_algorithm``.
ALGORITHM = "blake3"

#: The previous-hash value of the first chunk of every prompt.
INIT_HASH = 0

# The array typecode holding exactly 4 bytes here ("I" on every mainstream ABI).
_NATIVE_U32 = next((t for t in ("I", "L") if array(t).itemsize == 4), None)

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _prefix_bytes(prev: int) -> bytes:
    """Serialise a previous chunk hash as 8 signed big-endian bytes."""
    # Masking equals signed encoding for int64 and wraps the unsigned digests lmcache
    # derives from vLLM's bytes hashes instead of raising OverflowError.
    return (int(prev) & 0xFFFF_FFFF_FFFF_FFFF).to_bytes(8, "big")


def chunk_hash(prev: int, tokens: Sequence[int]) -> int:
    """Return blake3(prev || tokens)[:8] as a signed 64-bit int."""
    h = blake3.blake3(_prefix_bytes(prev))
    h.update(_u32_be(tokens))
    return int.from_bytes(h.digest(8), "big", signed=True)


def _u32_be(tokens: Sequence[int]) -> bytes:
    """Tokens as unsigned 32-bit big-endian; OverflowError for ids outside [0, 2**32)."""
    if _NATIVE_U32 is None:
        return struct.pack(f">{len(tokens)}I", *tokens)
    # array + byteswap measured ~30% faster than struct.pack(*tokens) for 256-token chunks;
    # this is the hot loop of request_finished's recompute fallback.
    a = array(_NATIVE_U32, tokens)
    if sys.byteorder == "little":
        a.byteswap()
    return a.tobytes()  # blake3 wants a byte buffer, not an array of u32


def iter_chunks(
    tokens: Sequence[int], chunk_size: int, save_unfull_chunk: bool = True
) -> Iterator[tuple[int, int]]:
    """Yield (start, end) of each chunk, as lmcache's ChunkedTokenDatabase cuts them."""
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    n = len(tokens)
    end = n if save_unfull_chunk else n - n % chunk_size
    for start in range(0, end, chunk_size):
        yield start, min(start + chunk_size, n)


def chain_hashes(
    tokens: Sequence[int], chunk_size: int = 256, save_unfull_chunk: bool = True
) -> list[int]:
    """Return the prefix-chained hash of every chunk of ``tokens``."""
    toks = _as_int_list(tokens)
    out: list[int] = []
    prev = INIT_HASH
    for start, end in iter_chunks(toks, chunk_size, save_unfull_chunk):
        prev = chunk_hash(prev, toks[start:end])
        out.append(prev)
    return out


def to_hex(h: int) -> str:
    """Format a chunk hash as the original does: lowercase hex, '-' for negatives."""
    return f"{h:x}"


def from_hex(s: str) -> int:
    """Parse a chunk hash written by to_hex(); rejects values outside int64."""
    v = int(s, 16)
    if not _INT64_MIN <= v <= _INT64_MAX:
        raise ValueError(f"chunk hash out of int64 range: {s!r}")
    return v


def chain_hashes_hex(
    tokens: Sequence[int], chunk_size: int = 256, save_unfull_chunk: bool = True
) -> list[str]:
    """chain_hashes() formatted with to_hex()."""
    return [to_hex(h) for h in chain_hashes(tokens, chunk_size, save_unfull_chunk)]


def _as_int_list(tokens: Any) -> list[int]:
    """Accept lists, tuples and torch tensors without importing torch."""
    if hasattr(tokens, "tolist"):
        return list(tokens.tolist())
    return list(tokens)


def lmcache_hash_func(args: Any) -> int:
    """Hash function with lmcache's ``hash_func((prefix, tokens, extra))`` convention.

    Extra keys are ignored, as lmcache 0.5.6's own token database does. Anything that
    is not such a triple (vLLM's ``init_none_hash`` calls the function on the seed
    string) gets a deterministic hash of its bytes; install() pins the first chunk's
    prefix to INIT_HASH so that value never enters a chain.
    """
    if isinstance(args, tuple) and len(args) == 3:
        prefix, tokens, _extra = args
        if isinstance(prefix, bytes | bytearray):
            prefix = int.from_bytes(bytes(prefix[:8]), "big", signed=True)
        return chunk_hash(int(prefix), _as_int_list(tokens))
    raw = args if isinstance(args, bytes | bytearray) else repr(args).encode()
    return int.from_bytes(blake3.blake3(bytes(raw)).digest(8), "big", signed=True)
