"""The stock-server stand-in against the REAL lmcache 0.5.6 multiprocess server: the same
requests get the same answers, and the adapter's probe reads the same capabilities."""

from __future__ import annotations

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

import httpx  # noqa: E402
from support.lmcache_mp_proc import mp_server  # noqa: E402
from support.lmcache_mp_server import PROBED_CAPS, FakeLMCacheMPServer  # noqa: E402

from ramakv_daemon.adapters.backends.lmcache_mp import LMCacheMPBackend, kv_rank  # noqa: E402
from ramakv_daemon.ports import EvictMode  # noqa: E402

MODEL = "tiny/llama"


def _key(h: str) -> dict:
    return {
        "chunk_hash_hex": h,
        "model_name": MODEL,
        "kv_rank": kv_rank(1, 0),
        "object_group_id": 0,
        "cache_salt": "",
    }


# (method, path, body, the answer's fields compared: None = the whole body)
EXCHANGES = [
    ("GET", "/healthcheck", None, None),
    ("GET", "/config/adapters", None, None),
    ("GET", "/nothing/here", None, None),
    ("DELETE", "/cache/objects", {"keys": [_key("ab12")], "tier": "l1"}, None),
    ("DELETE", "/cache/objects", {"keys": [_key("ab12")], "tier": "all"}, None),
    ("DELETE", "/cache/objects", {"keys": [_key("zz")], "tier": "all"}, None),
    ("DELETE", "/cache/objects", {"keys": [], "tier": "bogus"}, "status"),
    (
        "POST",
        "/cache/prefetches",
        {"model_name": MODEL, "world_size": 1, "token_ids": list(range(600))},
        None,
    ),
    ("GET", "/cache/prefetches/nope", None, None),
]


async def _ask(client: httpx.AsyncClient, url: str, method: str, path: str, body) -> tuple:
    r = await client.request(method, url + path, json=body)
    return r.status_code, r.json()


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    with mp_server(tmp_path_factory.mktemp("lmcache_mp")) as server:
        yield server


async def test_the_stand_in_answers_as_the_real_server(real):
    async with FakeLMCacheMPServer() as fake, httpx.AsyncClient() as c:
        for method, path, body, only in EXCHANGES:
            want = await _ask(c, real.url, method, path, body)
            got = await _ask(c, fake.url, method, path, body)
            if only == "status":
                assert got[0] == want[0] == 422, (path, body, got, want)
            else:
                assert got == want, (method, path, body)
        real_status = (await c.get(real.url + "/status")).json()
        fake_status = (await c.get(fake.url + "/status")).json()
        for field in ("is_healthy", "engine_type", "chunk_size", "hash_algorithm"):
            assert fake_status[field] == real_status[field]
        real_mp = (await c.get(real.url + "/config")).json()["mp"]
        fake_mp = (await c.get(fake.url + "/config")).json()["mp"]
        assert {k: real_mp[k] for k in fake_mp} == fake_mp


async def test_the_adapter_probes_and_steers_the_real_server(real):
    b = LMCacheMPBackend(real.url, MODEL)
    try:
        caps = await b.start()
        assert caps.as_dict() == PROBED_CAPS
        assert (await b.evict(["ab12"], EvictMode.DEMOTE)).ok
        res = await b.evict(["ab12", "cd34"], EvictMode.DELETE)
        assert res.ok and res.body == {"deleted": 2, "skipped": 0, "ok": True}
        res = await b.prefetch_tokens(list(range(600)))
        assert not res.ok and res.status == 503 and "no layout registered" in res.detail
    finally:
        await b.close()


def test_kv_rank_matches_lmcaches_object_key():
    from lmcache.v1.distributed.api import ObjectKey

    for world in (1, 2, 4):
        for rank in range(world):
            assert kv_rank(world, rank) == ObjectKey.ComputeKVRank(world, rank, world, rank)


def test_l2_file_names_are_lmcaches_fs_adapters():
    """The daemon's disk budget reads the folder by these names: lmcache's own functions
    write and read the same ones."""
    from lmcache.v1.distributed.api import ObjectKey
    from lmcache.v1.distributed.l2_adapters import fs_l2_adapter as fs

    from ramakv_daemon.adapters.backends.lmcache_fs_l2 import file_name, parse_name

    for model, world, group, salt in (("a/b", 1, 0, ""), ("m", 4, 3, "salt1"), (MODEL, 2, 0, "")):
        for rank in range(world):
            key = ObjectKey(bytes.fromhex("00ab12ff"), model, kv_rank(world, rank), group, salt)
            name = fs._object_key_to_filename(key)
            assert file_name(model, kv_rank(world, rank), "00AB12FF", salt, group) == name
            back = fs._filename_to_object_key(name)
            assert parse_name(name) == (
                back.model_name,
                back.kv_rank,
                back.object_group_id,
                back.chunk_hash.hex(),
                back.cache_salt,
            )


async def test_the_real_servers_all_tier_delete_removes_the_l2_files(real):
    """The budget deletes through the server: its all-tier delete unlinks the file the
    fs adapter keeps for the key (files placed as the adapter writes them)."""
    from ramakv_daemon.adapters.backends.lmcache_fs_l2 import file_name

    kept = real.l2_dir / file_name(MODEL, kv_rank(1, 0), "5555")
    gone = real.l2_dir / file_name(MODEL, kv_rank(1, 0), "6666")
    for path in (kept, gone):
        path.write_bytes(b"\0" * 64)
    b = LMCacheMPBackend(real.url, MODEL)
    try:
        assert (await b.evict(["6666"], EvictMode.DEMOTE)).ok
        assert gone.exists()  # a demote is L1 only
        assert (await b.evict(["6666"], EvictMode.DELETE)).ok
        assert not gone.exists() and kept.exists()
    finally:
        await b.close()
        kept.unlink()
