"""LMCacheBackend against the fake memory API: wire format, tiers, failures, logging."""

from __future__ import annotations

import logging

import pytest
from support.daemon_app import RecordingBackend

from ramakv_daemon.adapters.backends.lmcache import LMCacheBackend
from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.ports import EvictMode

HASHES = ["-6ed9a448787a198f", "-4ca98d8c9e52152e", "3f5c45ecbab5e9fd"]


@pytest.fixture
async def backend(fake_lmcache):
    b = LMCacheBackend(fake_lmcache.url, timeout=1.0)
    yield b
    await b.close()


async def test_prefetch_sends_hashes_verbatim_and_lookup_id(backend, fake_lmcache):
    res = await backend.prefetch(HASHES, "s1:3")
    assert res.ok and res.status == 200
    assert res.body == {"status": "prefetch_started", "lookup_id": "s1:3", "num_chunks": 3}
    assert fake_lmcache.calls("prefetch") == [{"chunk_hashes": HASHES, "lookup_id": "s1:3"}]


async def test_delete_sends_no_locations_demote_sends_ddr_only(backend, fake_lmcache):
    fake_lmcache.put(HASHES)
    demoted = await backend.evict(HASHES[:2], EvictMode.DEMOTE)
    deleted = await backend.evict(HASHES[2:], EvictMode.DELETE)
    assert fake_lmcache.calls("evict") == [
        {"chunk_hashes": HASHES[:2], "locations": ["LocalCPUBackend"]},
        {"chunk_hashes": HASHES[2:]},
    ]
    assert demoted.ok and demoted.body["num_evicted"] == 2
    assert deleted.ok and deleted.body["num_evicted"] == 2
    res, locs = await backend.query(HASHES)
    assert res.ok
    assert locs.locations == {
        HASHES[0]: ["LocalDiskBackend"],
        HASHES[1]: ["LocalDiskBackend"],
        HASHES[2]: [],
    }


async def test_tier_lists_are_configurable(fake_lmcache):
    b = LMCacheBackend(
        fake_lmcache.url,
        delete_locations=["LocalCPUBackend", "LocalDiskBackend"],
        demote_locations=None,
    )
    try:
        await b.evict(HASHES[:1], EvictMode.DELETE)
        await b.evict(HASHES[:1], EvictMode.DEMOTE)
    finally:
        await b.close()
    assert fake_lmcache.calls("evict") == [
        {"chunk_hashes": HASHES[:1], "locations": ["LocalCPUBackend", "LocalDiskBackend"]},
        {"chunk_hashes": HASHES[:1]},
    ]


async def test_empty_lists_are_never_sent(backend, fake_lmcache):
    assert (await backend.prefetch([], "t")).ok
    assert (await backend.evict([], EvictMode.DELETE)).ok
    res, locs = await backend.query([])
    assert res.ok and locs.locations == {}
    assert fake_lmcache.requests == []


@pytest.mark.parametrize("mode,status", [("503", 503), ("500", 500), ("malformed", 200)])
async def test_server_errors_are_results_not_exceptions(backend, fake_lmcache, mode, status):
    await fake_lmcache.set_failure(mode)
    for res in (
        await backend.prefetch(HASHES, "t"),
        await backend.evict(HASHES, EvictMode.DELETE),
        (await backend.query(HASHES))[0],
    ):
        assert not res.ok and res.status == status and res.detail
    if mode == "500":
        assert "workers failed" in res.detail and "failed_workers" in res.body


async def test_refused_and_slow_give_status_zero(backend, fake_lmcache):
    await fake_lmcache.refuse()
    res = await backend.prefetch(HASHES, "t")
    assert not res.ok and res.status == 0 and "Connect" in res.detail
    await fake_lmcache.accept()
    await fake_lmcache.set_failure("slow", times=1, delay=2.0)
    res = await backend.evict(HASHES, EvictMode.DELETE)
    assert not res.ok and res.status == 0 and "Timeout" in res.detail
    assert (await backend.evict(HASHES, EvictMode.DELETE)).ok  # healed after one call


async def test_query_rejects_wrong_shape(backend, fake_lmcache, monkeypatch):
    await fake_lmcache.set_failure("malformed", times=1)
    res, locs = await backend.query(HASHES)
    assert not res.ok and locs.locations == {}


async def test_each_round_trip_is_logged(backend, fake_lmcache, caplog):
    caplog.set_level(logging.INFO, logger="ramakv.backend")
    await backend.prefetch(HASHES, "t")
    await fake_lmcache.set_failure("503", times=1)
    await backend.evict(HASHES, EvictMode.DELETE)
    msgs = [r.getMessage() for r in caplog.records if r.name == "ramakv.backend"]
    assert len(msgs) == 2
    assert "POST " + fake_lmcache.url + "/memory/prefetch count=3 status=200 ms=" in msgs[0]
    assert "prefetch_started" in msgs[0]
    assert "/memory/evict count=3 status=503" in msgs[1]
    assert caplog.records[-1].levelno == logging.WARNING


async def test_noop_backend_answers_ok_and_empty():
    b = NoopBackend()
    assert (await b.prefetch(HASHES, "t")).ok
    assert (await b.evict(HASHES, EvictMode.DEMOTE)).ok
    res, locs = await b.query(HASHES)
    assert res.ok and locs.locations == {}
    await b.close()


async def test_prefetch_cancel_names_the_lookup_id_and_says_what_stopped(backend, fake_lmcache):
    fake_lmcache.hold_prefetches = True  # as behind a busy worker
    await backend.prefetch(HASHES, "prefetch_s1:4")
    res = await backend.cancel_prefetch("prefetch_s1:4")
    assert res.ok and res.body == {
        "status": "success",
        "lookup_id": "prefetch_s1:4",
        "cancelled": 1,
        "skipped": 3,
    }
    assert fake_lmcache.calls("cancel") == [{"lookup_id": "prefetch_s1:4"}]
    again = await backend.cancel_prefetch("prefetch_s1:4")
    assert again.ok and again.body["cancelled"] == 0  # safe to repeat
    assert fake_lmcache.release_prefetches() == 0  # the stopped one never loads


async def test_a_stock_cache_answers_a_prefetch_cancel_404(backend, fake_lmcache):
    fake_lmcache.cancels = False
    res = await backend.cancel_prefetch("prefetch_s1:1")
    assert not res.ok and res.status == 404
    noop = await NoopBackend().cancel_prefetch("prefetch_s1:1")
    assert not noop.ok and noop.status == 404  # the port's default: knows no cancel


async def test_order_posts_hashes_and_position_as_ascend_ext_takes_them(backend, fake_lmcache):
    fake_lmcache.put(HASHES[:2])
    res = await backend.order(HASHES, "cold")
    assert res.ok and res.body == {"status": "success", "moved": 4, "missing": 1}
    assert fake_lmcache.calls("order") == [{"chunk_hashes": HASHES, "position": "cold"}]
    assert list(fake_lmcache.cold) == HASHES[:2]  # nothing removed, hinted cold
    res, locs = await backend.query(HASHES[:2])
    assert all(t == ["LocalCPUBackend", "LocalDiskBackend"] for t in locs.locations.values())


async def test_a_missing_order_route_is_remembered_and_logged_once(
    backend, fake_lmcache, caplog: pytest.LogCaptureFixture
):
    fake_lmcache.orders = False  # a stock memory API: 404
    with caplog.at_level(logging.WARNING, logger="ramakv.backend"):
        first = await backend.order(HASHES, "cold")
        second = await backend.order(HASHES, "cold")
    assert (first.ok, first.status, second.ok, second.status) == (False, 404, False, 404)
    assert backend.order_missing
    assert len(fake_lmcache.calls("order")) == 1  # the second never went out
    assert sum("has no /memory/order" in r.getMessage() for r in caplog.records) == 1


async def test_the_noop_backend_accepts_orders_and_the_port_default_is_unsupported():
    assert (await NoopBackend().order(HASHES, "cold")).ok
    stock = await RecordingBackend().order(HASHES, "cold")  # the port's default
    assert not stock.ok and stock.status == 404
