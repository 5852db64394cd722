"""The proxy's stock-server keys are lmcache's own TokenHasher(chunk_size, "blake3")."""

from __future__ import annotations

import random

import pytest

from ramakv_proxy.stock_keys import chunk_hashes, hashes_of, server_problem


@pytest.mark.lmcache
@pytest.mark.parametrize("chunk_size,length", [(256, 1250), (16, 40), (256, 255), (4, 0)])
def test_same_keys_as_lmcaches_token_hasher(chunk_size, length):
    th = pytest.importorskip("lmcache.v1.multiprocess.token_hasher")
    rng = random.Random(length)
    tokens = [rng.randrange(150_000) for _ in range(length)]
    want = [h.hex() for h in th.TokenHasher(chunk_size, "blake3").compute_chunk_hashes(tokens)]
    assert chunk_hashes(tokens, chunk_size) == want
    assert len(want) == length // chunk_size  # complete chunks only


def test_prefix_shared_prompts_share_their_leading_keys_once():
    a, b = list(range(512)), list(range(256)) + [7] * 256
    ka, kb = chunk_hashes(a, 256), chunk_hashes(b, 256)
    assert ka[0] == kb[0] and ka[1] != kb[1]
    assert hashes_of([a, b], 256) == [ka[0], ka[1], kb[1]]


def test_bad_chunk_size_and_foreign_hash_are_named():
    with pytest.raises(ValueError, match="chunk_size"):
        chunk_hashes([1], 0)
    assert server_problem({"mp": {"hash_algorithm": "blake3"}}) is None
    assert "sha256_cbor" in server_problem({"mp": {"hash_algorithm": "sha256_cbor"}})
    assert server_problem({"hash_algorithm": "blake3"}) is None  # a /status answer
