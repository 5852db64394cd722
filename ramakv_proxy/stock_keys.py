"""The stock LMCache server's chunk keys from a prompt's token ids (its TokenHasher, blake3).

With the unmodified stack (vLLM + ``LMCacheMPConnector`` + lmcache's multiprocess server)
no answer carries chunk hashes: the proxy tokenises the prompt with the engine's
``/tokenize`` and hashes it as the server does, ``lmcache.v1.multiprocess.token_hasher.
TokenHasher(chunk_size, "blake3").compute_chunk_hashes(token_ids)``: a rolling blake3 over
complete chunks only, seeded with ``blake3(int64 0 || uint32 0)``. With blake3 the seed is
computed, so keys are the same across restarts and PYTHONHASHSEED (sha256_cbor seeds from
vLLM and changes with it). The same function is written out here (it needs only blake3) so
the proxy does not import lmcache (torch, numba); tests/proxy/test_stock_keys.py holds it
to lmcache's own. The hex digests are the daemon's chunk hashes; the backend adapter
(ramakv_daemon/adapters/backends/lmcache_mp.py) expands each to one key per rank.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence

HASH_ALGORITHM = "blake3"


def _digest(prefix: bytes, tokens: Sequence[int]) -> bytes:
    import blake3  # the engine extra's dependency (vLLM needs it); imported on first use

    h = blake3.blake3()
    h.update(prefix)
    h.update(struct.pack(f">{len(tokens)}I", *tokens))
    return h.digest()


# TokenHasher._init_none_hash for blake3: hash_func((0, (0,), None)), the int prefix as
# 8 signed big-endian bytes.
_SEED_PREFIX = (0).to_bytes(8, byteorder="big", signed=True)


def chunk_hashes(token_ids: Sequence[int], chunk_size: int) -> list[str]:
    """Hex chunk hashes of the complete chunks of ``token_ids`` (a partial tail has none)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    prefix = _digest(_SEED_PREFIX, (0,))
    out: list[str] = []
    for start in range(0, len(token_ids) - len(token_ids) % chunk_size, chunk_size):
        prefix = _digest(prefix, token_ids[start : start + chunk_size])
        out.append(prefix.hex())
    return out


def hashes_of(prompts: Iterable[Sequence[int]], chunk_size: int) -> list[str]:
    """Chunk hashes of each prompt, in order, each once (a batch of prompts: all)."""
    seen: dict[str, None] = {}
    for ids in prompts:
        for h in chunk_hashes(ids, chunk_size):
            seen.setdefault(h, None)
    return list(seen)


def server_problem(config: object) -> str | None:
    """Why a server's ``GET /config`` (or ``/status``) answer rules out computing its keys
    here, or None; its ``hash_algorithm`` must be blake3."""
    mp = config.get("mp", config) if isinstance(config, dict) else None
    algo = mp.get("hash_algorithm") if isinstance(mp, dict) else None
    if algo != HASH_ALGORITHM:
        return (
            f"the LMCache server hashes with {algo!r}: keys computed outside the engine match "
            "only with blake3 (start it with --hash-algorithm blake3, its default)"
        )
    return None
