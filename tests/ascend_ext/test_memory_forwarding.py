"""Scheduler -> worker forwarding: two real devserver workers and a scheduler process."""

from __future__ import annotations

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

import httpx  # noqa: E402
from support.memapi_rig import CPU, DISK, devserver, on_disk, tokens  # noqa: E402
from support.reliability import wait_for  # noqa: E402

from ascend_ext.hashing import chain_hashes_hex  # noqa: E402


def _wait_disk(url: str, hashes: list[str]) -> None:
    assert wait_for(lambda: on_disk(httpx, hashes, url), every=0.02)


def test_scheduler_forwards_merges_and_reports_a_dead_worker(tmp_path):
    common = ("--world-size", "2", "--ddr-mb", "4")
    w0_args = (*common, "--worker-id", "0", "--disk-dir", str(tmp_path / "w0"))
    w1_args = (*common, "--worker-id", "1", "--disk-dir", str(tmp_path / "w1"))
    with (
        devserver(*w0_args, hash_seed="1") as (w0, _),
        devserver(*w1_args, hash_seed="2") as (w1, p1),
        devserver("--workers", f"{w0},{w1}") as (sched, _),
    ):
        h0 = httpx.post(w0 + "/engine/turn", json={"token_ids": tokens(3)}).json()
        h1 = httpx.post(w1 + "/engine/turn", json={"token_ids": tokens(2)}).json()
        hashes = h0["kv_transfer_params"]["chunk_hashes"]
        # blake3 chain hashes: workers with different PYTHONHASHSEEDs name chunks alike
        assert hashes == chain_hashes_hex(tokens(3), 16)
        assert h1["kv_transfer_params"]["chunk_hashes"] == hashes[:2]
        _wait_disk(w0, hashes)
        _wait_disk(w1, hashes[:2])

        r = httpx.post(sched + "/memory/evict", json={"chunk_hashes": hashes, "locations": [CPU]})
        assert r.status_code == 200 and r.json() == {"status": "success", "num_evicted": 5}
        q = httpx.post(sched + "/memory/query", json={"chunk_hashes": hashes}).json()
        assert q == {h: [DISK] for h in hashes}

        r = httpx.post(sched + "/memory/prefetch", json={"chunk_hashes": hashes, "lookup_id": "x"})
        assert r.status_code == 200
        assert r.json() == {
            "status": "prefetch_started",
            "lookup_id": "x",
            "num_chunks": 3,
            "workers": [w0, w1],
        }
        back = {h: [CPU, DISK] for h in hashes[:2]}
        assert wait_for(
            lambda: (
                httpx.post(w1 + "/memory/query", json={"chunk_hashes": hashes[:2]}).json() == back
            ),
            every=0.02,
        )

        # A cancel fans out too (each worker's prefetch "x" has ended: nothing to stop).
        for url in (w0, w1):
            assert wait_for(
                lambda u=url: httpx.get(u + "/memory/prefetch/x").json()["state"] == "done",
                every=0.02,
            )
        r = httpx.post(sched + "/memory/prefetch/cancel", json={"lookup_id": "x"})
        assert r.status_code == 200
        assert r.json() == {"status": "success", "lookup_id": "x", "cancelled": 0, "skipped": 0}
        r = httpx.post(sched + "/memory/prefetch/cancel", json={"lookup_id": 3})
        assert r.status_code == 400 and "'lookup_id'" in r.json()["error"]

        p1.terminate()
        p1.wait(10)
        r = httpx.post(sched + "/memory/prefetch/cancel", json={"lookup_id": "x"})
        assert r.status_code == 500 and list(r.json()["failed_workers"]) == [w1]
        assert r.json()["partial"]["cancelled"] == 0
        r = httpx.post(sched + "/memory/evict", json={"chunk_hashes": hashes})
        assert r.status_code == 500
        body = r.json()
        assert body["error"] == "1 of 2 workers failed"
        assert list(body["failed_workers"]) == [w1]
        assert "Connect" in body["failed_workers"][w1]
        assert body["partial"] == {"status": "success", "num_evicted": 6}  # w0: 3 x 2 tiers
        r = httpx.post(sched + "/memory/query", json={"chunk_hashes": hashes})
        assert r.status_code == 500 and r.json()["partial"] == {h: [] for h in hashes}


def test_scheduler_validates_before_forwarding(tmp_path):
    with devserver("--workers", "http://127.0.0.1:9") as (sched, _):
        r = httpx.post(sched + "/memory/evict", json={"chunk_hashes": [3]})
        assert r.status_code == 400 and "'chunk_hashes'" in r.json()["error"]
        r = httpx.post(sched + "/memory/query", json={"chunk_hashes": ["ab"]})
        assert r.status_code == 500 and r.json()["failed_workers"]
