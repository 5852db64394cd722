"""Pins the blake3 chain-hash format; runs without lmcache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import blake3
import pytest

from ascend_ext.hashing import (
    INIT_HASH,
    chain_hashes,
    chain_hashes_hex,
    chunk_hash,
    from_hex,
    iter_chunks,
    lmcache_hash_func,
    to_hex,
)

ROOT = Path(__file__).resolve().parents[2]

# Computed once with ascend_ext.hashing and frozen: any change here breaks every
# session map the daemon has stored, so it must be a deliberate format change.
VECTORS = [
    (list(range(10)), 4, True, ["3100492fd51474a6", "-7af9f52d7e5b2770", "2b38323df9990274"]),
    (list(range(10)), 4, False, ["3100492fd51474a6", "-7af9f52d7e5b2770"]),
    (
        list(range(1000)),
        256,
        True,
        ["12d3913728a48b07", "-3cdc97cffe1903f0", "429228258d014ba8", "-40eb9c2b54f58f7"],
    ),
]


@pytest.mark.parametrize(("tokens", "size", "unfull", "expected"), VECTORS)
def test_fixed_vectors(tokens: list[int], size: int, unfull: bool, expected: list[str]) -> None:
    assert chain_hashes_hex(tokens, size, unfull) == expected


def test_single_chunk_vectors() -> None:
    assert to_hex(chunk_hash(0, [])) == "71e0a99173564931"
    assert to_hex(chunk_hash(0, [1, 2, 3])) == "-7d8012bfebc6c2f4"
    assert to_hex(chunk_hash(-1, [4294967295])) == "42dabf38fb2728e2"


def test_format_spelled_out_with_raw_blake3() -> None:
    """The byte layout, written out by hand: prev as 8 signed BE bytes, tokens as u32 BE."""
    prev = -2
    data = prev.to_bytes(8, "big", signed=True) + b"".join(
        t.to_bytes(4, "big") for t in (7, 65536, 4294967295)
    )
    want = int.from_bytes(blake3.blake3(data).digest()[:8], "big", signed=True)
    assert chunk_hash(prev, [7, 65536, 4294967295]) == want
    first = int.from_bytes(
        blake3.blake3(b"\0" * 8 + (5).to_bytes(4, "big")).digest()[:8], "big", signed=True
    )
    assert INIT_HASH == 0
    assert chain_hashes([5], 16) == [first]


def test_chain_links_each_chunk_to_the_previous_hash() -> None:
    toks = list(range(40))
    hs = chain_hashes(toks, 16)
    assert hs[0] == chunk_hash(0, toks[0:16])
    assert hs[1] == chunk_hash(hs[0], toks[16:32])
    assert hs[2] == chunk_hash(hs[1], toks[32:40])


def test_prefix_dependence() -> None:
    a = chain_hashes(list(range(48)), 16)
    b = chain_hashes([999] + list(range(1, 48)), 16)
    # Same tokens in chunks 1 and 2, different first chunk: every hash differs.
    assert all(x != y for x, y in zip(a, b, strict=True))
    # Changing only the last chunk keeps the shared prefix's hashes.
    c = chain_hashes(list(range(47)) + [12345], 16)
    assert c[:2] == a[:2] and c[2] != a[2]


def test_chunk_boundaries_and_partial_last_chunk() -> None:
    toks = list(range(33))
    assert list(iter_chunks(toks, 16)) == [(0, 16), (16, 32), (32, 33)]
    assert list(iter_chunks(toks, 16, save_unfull_chunk=False)) == [(0, 16), (16, 32)]
    assert len(chain_hashes(toks, 16)) == 3
    assert chain_hashes(toks, 16, False) == chain_hashes(toks[:32], 16)
    # A prompt that is a prefix at a chunk boundary shares all its hashes.
    assert chain_hashes(toks[:32], 16) == chain_hashes(toks, 16)[:2]
    # The partial last chunk's hash changes when it grows.
    assert chain_hashes(toks + [1], 16)[2] != chain_hashes(toks, 16)[2]
    assert chain_hashes([], 16) == []
    with pytest.raises(ValueError):
        list(iter_chunks(toks, 0))


def test_hex_round_trip_and_range() -> None:
    for h in chain_hashes(list(range(500)), 16):
        s = to_hex(h)
        assert s == s.lower() and (s.startswith("-") == (h < 0))
        assert from_hex(s) == h
    with pytest.raises(ValueError):
        from_hex("1" + "0" * 16)


def test_tokens_must_fit_u32() -> None:
    with pytest.raises(Exception):  # noqa: B017 - struct.error, never a silent wrap
        chunk_hash(0, [1 << 32])
    with pytest.raises(Exception):  # noqa: B017
        chunk_hash(0, [-1])


def test_lmcache_calling_convention() -> None:
    toks = (1, 2, 3)
    assert lmcache_hash_func((0, toks, ())) == chunk_hash(0, toks)
    assert lmcache_hash_func((-5, list(toks), None)) == chunk_hash(-5, toks)
    # Extra keys are ignored, as lmcache 0.5.6 ignores them.
    assert lmcache_hash_func((0, toks, ("lora",))) == chunk_hash(0, toks)
    # An unsigned 64-bit prefix (lmcache folds vLLM byte digests that way) wraps to signed.
    assert lmcache_hash_func(((1 << 64) - 2, toks, ())) == chunk_hash(-2, toks)
    # vLLM's init_none_hash passes the seed string: deterministic, no crash.
    assert lmcache_hash_func("0") == lmcache_hash_func("0")
    assert isinstance(lmcache_hash_func(b"seed"), int)


def test_accepts_objects_with_tolist() -> None:
    class Tensorish:
        def tolist(self) -> list[int]:
            return list(range(20))

    assert chain_hashes(Tensorish(), 16) == chain_hashes(list(range(20)), 16)


# lmcache and torch are blocked in the child: the format must not depend on them.
_CHILD = (
    "import json,sys; sys.modules['lmcache'] = sys.modules['torch'] = None; "
    "import ascend_ext; from ascend_ext.hashing import chain_hashes_hex; "
    "print(json.dumps(chain_hashes_hex(list(range(300)), 64)))"
)


def test_identical_across_processes_and_hash_seeds() -> None:
    outs = set()
    for seed in ("0", "1", "4242", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        res = subprocess.run(
            [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
        )
        outs.add(res.stdout.strip())
    assert len(outs) == 1
    assert json.loads(outs.pop()) == chain_hashes_hex(list(range(300)), 64)
