"""POST /memory/order on real lmcache 0.5.6 engines: the allocator then evicts in the hinted
order (DDR and disk), kept and prefetched chunks go warm, errors, and the scheduler fan-out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

import httpx  # noqa: E402
from support.memapi_rig import CPU, DISK, cpu_engine, on_disk, serve, tokens, wait_prefetch  # noqa: E402
from support.reliability import wait_for  # noqa: E402

from ascend_ext.memory_api import ops_for  # noqa: E402
from ascend_ext_dev.devserver import create_app  # noqa: E402

# 0.05 MB holds 12 of the dev engine's 4 KiB chunks, in DDR as on disk.
TWELVE_MB = 0.05


@pytest.fixture
def small_ddr(tmp_path: Path) -> Iterator[tuple[httpx.Client, Any]]:
    """(client, engine): DDR holds 12 chunks, disk plenty."""
    with cpu_engine(tmp_path / "d", ddr_mb=TWELVE_MB) as engine, serve(create_app(engine)) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, engine


def _store(client: httpx.Client, n: int, start: int) -> list[str]:
    """Store a prompt of n new chunks and wait until every disk copy has landed (a pending
    write holds a reference, which would make the chunk unevictable from DDR meanwhile)."""
    r = client.post("/engine/turn", json={"token_ids": tokens(n, start=start)})
    assert r.status_code == 200, r.text
    assert r.json()["served"] == ["computed"] * n
    hashes = r.json()["kv_transfer_params"]["chunk_hashes"]
    assert wait_for(lambda: on_disk(client, hashes), every=0.02), "disk writes did not land"
    return hashes


def _where(client: httpx.Client, hashes: list[str]) -> dict[str, list[str]]:
    return client.post("/memory/query", json={"chunk_hashes": hashes}).json()


def _in_ddr(client: httpx.Client, hashes: list[str]) -> list[str]:
    return [h for h, tiers in _where(client, hashes).items() if CPU in tiers]


def _ddr_full(engine: Any) -> bool:
    """No chunk-sized allocation succeeds without evicting."""
    import torch

    cpu = engine.storage_manager.storage_backends[CPU]
    probe = cpu.allocate(
        torch.Size(engine.metadata.kv_shape), torch.float16, eviction=False, busy_loop=False
    )
    if probe is None:
        return True
    probe.ref_count_down()
    return False


def _order(client: httpx.Client, hashes: list[str], position: str, **extra: Any) -> dict:
    r = client.post("/memory/order", json={"chunk_hashes": hashes, "position": position, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_cold_chunks_stay_hits_then_leave_ddr_first_tail_first(small_ddr):
    client, engine = small_ddr
    a = _store(client, 6, 7000)
    b = _store(client, 6, 8000)  # newest: plain LRU would evict a's chunks first
    assert _in_ddr(client, a + b) == a + b and _ddr_full(engine)

    assert _order(client, b, "cold") == {"status": "success", "moved": 12, "missing": 0}
    # Still hits while there is room: the order changed, nothing left.
    assert _in_ddr(client, a + b) == a + b
    again = client.post("/engine/turn", json={"token_ids": tokens(6, start=8000)}).json()
    assert again["served"] == ["ddr"] * 6 and again["bytes_ok"] is True

    c = _store(client, 3, 9000)  # needs room for 3: the allocator evicts the coldest
    assert _in_ddr(client, c) == c
    assert _in_ddr(client, a) == a  # the older chunks stay: the hint, not LRU, decided
    assert _in_ddr(client, b) == b[:3]  # b lost its tail, last chunk first
    assert _where(client, b[3:]) == {h: [DISK] for h in b[3:]}  # cold is not deleted


def test_cold_chunks_queue_behind_older_cold_ones(small_ddr):
    """Released longest ago goes first: a session paused a moment ago (hinted cold last) is
    not evicted ahead of one that ended before it; a warm hint takes a chunk out of the
    cold queue, and the same chunks hinted again join its back."""
    client, engine = small_ddr
    a = _store(client, 6, 7000)
    b = _store(client, 6, 8000)
    assert _ddr_full(engine)
    _order(client, a, "cold")  # a ended first
    _order(client, b, "cold")  # b paused later
    c = _store(client, 3, 9000)
    assert _in_ddr(client, a + b + c) == a[:3] + b + c  # a's tail went, b stayed
    _order(client, b[:2], "warm")
    _order(client, a[:3], "cold")  # hinted again: behind b[2:] now
    d = _store(client, 5, 9500)  # room for 5: b[2:] (older cold), then a's tail
    assert _in_ddr(client, a + b + c + d) == a[:2] + b[:2] + c + d


def test_a_pinned_cold_chunk_is_passed_over_not_evicted(small_ddr):
    """A hint moves in-use chunks too; the allocator skips them while pinned."""
    client, engine = small_ddr
    a = _store(client, 6, 7000)
    b = _store(client, 6, 8000)
    cpu = engine.storage_manager.storage_backends[CPU]
    pinned = ops_for(engine).key_for(b[5])
    assert cpu.pin(pinned)
    try:
        assert _order(client, b[4:], "cold", locations=[CPU])["moved"] == 2
        c = _store(client, 1, 9000)
        assert _in_ddr(client, a + b + c) == a + b[:4] + b[5:] + c  # b[4] went, not b[5]
    finally:
        cpu.unpin(pinned)


def test_warm_chunks_outlive_newer_ones(small_ddr):
    client, engine = small_ddr
    a = _store(client, 6, 7000)
    b = _store(client, 6, 8000)
    assert _ddr_full(engine)
    assert _order(client, a[:3], "warm", locations=[CPU]) == {
        "status": "success",
        "moved": 3,
        "missing": 0,
    }
    c = _store(client, 3, 9000)
    assert _in_ddr(client, a + b + c) == a[:3] + b + c  # LRU took the oldest unhinted: a[3:]
    c2 = _store(client, 3, 9500)
    assert _in_ddr(client, a + b + c2) == a[:3] + b[3:] + c2  # then b's head: plain LRU


def test_disk_tier_evicts_cold_chunks_first(tmp_path):
    with (
        cpu_engine(tmp_path / "d", ddr_mb=4, disk_mb=TWELVE_MB) as engine,
        serve(create_app(engine)) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        a = _store(client, 6, 7000)
        b = _store(client, 6, 8000)
        assert _order(client, a[3:], "cold", locations=[DISK]) == {
            "status": "success",
            "moved": 3,
            "missing": 0,
        }
        assert _where(client, a) == {h: [CPU, DISK] for h in a}  # DDR untouched, nothing gone
        c = _store(client, 2, 9000)  # the disk admits c by evicting its two coldest
        on_disk_now = [h for h, t in _where(client, a + b + c).items() if DISK in t]
        assert on_disk_now == a[:4] + b + c  # a[5], then a[4], left (the hint's tail first)
        assert _where(client, a[4:]) == {h: [CPU] for h in a[4:]}


def test_counts_missing_duplicates_and_locations(small_ddr):
    client, _ = small_ddr
    a = _store(client, 2, 7000)
    unknown = "7fffffff00000001"
    got = _order(client, [a[0], a[0], a[1], unknown], "warm")
    assert got == {"status": "success", "moved": 4, "missing": 1}  # 2 chunks x 2 tiers
    client.post("/memory/evict", json={"chunk_hashes": [a[1]], "locations": [CPU]})
    assert _order(client, a, "cold", locations=[CPU]) == {
        "status": "success",
        "moved": 1,
        "missing": 1,  # a[1] is on disk only, a tier not asked
    }
    assert _order(client, [], "cold") == {"status": "success", "moved": 0, "missing": 0}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"position": "cold"}, "missing required field 'chunk_hashes'"),
        ({"chunk_hashes": ["ab"]}, "missing required field 'position'"),
        ({"chunk_hashes": ["ab"], "position": "hot"}, "field 'position' must be 'cold' or 'warm'"),
        ({"chunk_hashes": ["ab"], "position": 1}, "field 'position' must be 'cold' or 'warm'"),
        ({"chunk_hashes": [1], "position": "cold"}, "field 'chunk_hashes' must be a list of"),
        ({"chunk_hashes": ["xyz"], "position": "cold"}, "non-hex entry 'xyz'"),
        (
            {"chunk_hashes": ["ab"], "position": "cold", "locations": "LocalCPUBackend"},
            "field 'locations' must be a list of strings",
        ),
        (
            {"chunk_hashes": ["ab"], "position": "cold", "locations": ["Nvme"]},
            "field 'locations' names unknown backend(s) ['Nvme']",
        ),
        ([1], "body must be a JSON object"),
    ],
)
def test_bad_requests_answer_400_and_change_nothing(small_ddr, body, error):
    client, engine = small_ddr
    a = _store(client, 2, 7000)
    cpu = engine.storage_manager.storage_backends[CPU]
    with cpu.cpu_lock:
        before = list(cpu.hot_cache)
    r = client.post("/memory/order", json=body)
    assert r.status_code == 400 and error in r.json()["error"], r.text
    with cpu.cpu_lock:
        assert list(cpu.hot_cache) == before
    assert _in_ddr(client, a) == a


def test_kept_and_prefetched_chunks_go_warm(small_ddr):
    """A keep (the daemon saw the chunks referenced again) and a prefetch of chunks already
    in DDR move them to the warm end; chunks loaded from disk arrive there (0.5.6's get)."""
    client, engine = small_ddr
    a = _store(client, 6, 7000)
    b = _store(client, 6, 8000)
    r = client.post("/memory/keep", json={"chunk_hashes": a[:2], "generation": 1})
    assert r.status_code == 200 and r.json()["cancelled"] == 0
    ops_for(engine).run_serial(lambda: None)  # the keep's warm move ran (worker order)
    c = _store(client, 2, 9000)
    assert _in_ddr(client, a + b + c) == a[:2] + a[4:] + b + c  # a[2:4] went, not a[:2]

    client.post("/memory/prefetch", json={"chunk_hashes": [a[4]], "lookup_id": "p1"})
    assert wait_prefetch(client, "p1")["already_ddr"] == 1
    disk = engine.storage_manager.storage_backends[DISK]
    key = ops_for(engine).key_for(a[4])
    with disk.disk_lock:
        assert list(disk.dict)[-1] == key  # its disk copy is the warmest too
    c2 = _store(client, 2, 9500)
    assert _in_ddr(client, a + b + c2) == a[:2] + a[4:5] + b[1:] + c2  # a[5], b[0] went
    client.post("/memory/prefetch", json={"chunk_hashes": [a[2]], "lookup_id": "p2"})
    assert wait_prefetch(client, "p2")["loaded"] == 1
    cpu = engine.storage_manager.storage_backends[CPU]
    with cpu.cpu_lock:
        assert list(cpu.hot_cache)[-1] == ops_for(engine).key_for(a[2])


def test_scheduler_fans_out_and_sums(tmp_path):
    with ExitStack() as stack:
        urls = []
        for i in range(2):
            engine = stack.enter_context(cpu_engine(tmp_path / f"w{i}", ddr_mb=4))
            urls.append(stack.enter_context(serve(create_app(engine))))
        sched = stack.enter_context(serve(create_app(None, worker_urls=urls)))
        dead = stack.enter_context(
            serve(create_app(None, worker_urls=[urls[0], "http://127.0.0.1:9"]))
        )
        w0, w1 = (stack.enter_context(httpx.Client(base_url=u, timeout=30)) for u in urls)
        hashes = _store(w0, 3, 100)
        assert _store(w1, 2, 100) == hashes[:2]  # the same chain on both workers

        body = {"chunk_hashes": hashes, "position": "cold"}
        r = httpx.post(sched + "/memory/order", json=body)
        assert r.status_code == 200
        assert r.json() == {"status": "success", "moved": 10, "missing": 1}  # (3+2) x 2 tiers
        r = httpx.post(sched + "/memory/order", json={**body, "locations": [DISK]})
        assert r.json() == {"status": "success", "moved": 5, "missing": 1}

        r = httpx.post(sched + "/memory/order", json={"chunk_hashes": hashes, "position": "up"})
        assert r.status_code == 400  # validated before any worker is asked
        assert r.json() == {"error": "field 'position' must be 'cold' or 'warm'"}
        r = httpx.post(sched + "/memory/order", json={**body, "locations": ["Nvme"]})
        assert r.status_code == 500 and len(r.json()["failed_workers"]) == 2  # workers know tiers

        r = httpx.post(dead + "/memory/order", json=body)
        assert r.status_code == 500
        assert r.json()["error"] == "1 of 2 workers failed"
        assert r.json()["partial"] == {"status": "success", "moved": 6, "missing": 0}
