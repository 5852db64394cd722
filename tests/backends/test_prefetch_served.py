"""A prefetch never outlives its request: once the session's turn_end is applied, the
daemon drops what it has not sent and cancels what the cache is loading (against the
stand-in memory API, which holds prefetches as a busy worker would)."""

from __future__ import annotations

import math
import re

import pytest

from ramakv_daemon.adapters.backends.lmcache import LMCacheBackend
from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import build
from ramakv_daemon.config import Config
from ramakv_daemon.delivery import prefetch

HASHES = ["a1", "a2", "a3"]
DISK = ("LocalDiskBackend",)


@pytest.fixture
async def daemon(tmp_path, fake_lmcache):
    db = str(tmp_path / "s.db")
    svc = build(
        Config(session_store_path=db), SqliteSessionStore(db), LMCacheBackend(fake_lmcache.url)
    )
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()
        await svc.backend.close()


async def _event(svc, drain=True, **body):
    status, answer = await svc.handle(body)
    assert status == 200 and answer["ok"], answer
    if drain:
        await svc.default.dispatcher.drain()
    return answer["data"]


async def _restored(svc, fake, sid="s", hashes=HASHES):
    """Session ``sid`` with ``hashes`` on disk only, suspended and restored: its prefetch
    sent (and held by the cache when fake.hold_prefetches is set)."""
    fake.put(hashes, DISK)
    await _event(svc, type="turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes})
    await _event(svc, type="session_suspend", session_id=sid)
    data = await _event(svc, type="snapshot_restore", session_id=sid)
    assert data["prefetch_count"] == len(hashes)
    return fake.calls("prefetch")[-1]["lookup_id"]


def _cancelled(svc) -> dict[str, tuple[float, float]]:
    """outcome -> (prefetches, chunks) from /metrics."""
    text = svc.metrics.render().decode()
    out: dict[str, tuple[float, float]] = {}
    for m in re.finditer(r'ramakv_prefetch_cancelled_total\{outcome="(\w+)"\} (\S+)', text):
        chunks = re.search(
            rf'ramakv_prefetch_cancelled_chunks_total\{{outcome="{m[1]}"\}} (\S+)', text
        )
        out[m[1]] = (float(m[2]), float(chunks[1]) if chunks else 0.0)
    return out


async def test_turn_end_cancels_the_restores_prefetch_the_cache_still_holds(daemon, fake_lmcache):
    fake_lmcache.hold_prefetches = True
    tag = await _restored(daemon, fake_lmcache)
    assert re.fullmatch(r"prefetch_s:[0-9a-z]+:\d+", tag)
    assert fake_lmcache.calls("cancel") == []
    await _event(
        daemon, type="turn_end", session_id="s", kv_transfer_params={"chunk_hashes": HASHES}
    )
    assert fake_lmcache.calls("cancel") == [{"lookup_id": tag}]
    assert fake_lmcache.cancelled == {tag: 3}
    assert fake_lmcache.release_prefetches() == 0  # nothing of it loads any more
    assert _cancelled(daemon) == {"stopped": (1.0, 3.0)}


async def test_a_later_prefetch_of_the_session_is_not_stopped_by_the_cancel(daemon, fake_lmcache):
    fake_lmcache.hold_prefetches = True
    first = await _restored(daemon, fake_lmcache)
    await _event(
        daemon, type="turn_end", session_id="s", kv_transfer_params={"chunk_hashes": HASHES}
    )
    await _event(daemon, type="session_suspend", session_id="s")
    await _event(daemon, type="snapshot_restore", session_id="s")
    second = fake_lmcache.calls("prefetch")[-1]["lookup_id"]
    assert second != first and second not in fake_lmcache.cancelled
    assert list(fake_lmcache.held) == [second]
    assert fake_lmcache.release_prefetches() == 3  # it loads: the cancel never touched it
    assert fake_lmcache.calls("cancel") == [{"lookup_id": first}]  # one per prefetch


async def test_a_prefetch_call_in_flight_at_turn_end_is_cancelled_once_answered(
    daemon, fake_lmcache, monkeypatch
):
    """The turn_end never waits for it; parts not sent yet are dropped, never sent."""
    monkeypatch.setattr(prefetch, "MAX_BATCH", 2)  # 3 chunks: two parts
    fake_lmcache.hold_prefetches = True
    hashes = ["b1", "b2", "b3"]
    fake_lmcache.put(hashes, DISK)
    await _event(
        daemon, type="turn_end", session_id="t", kv_transfer_params={"chunk_hashes": hashes}
    )
    await _event(daemon, type="session_suspend", session_id="t")
    await fake_lmcache.set_failure("slow", delay=math.inf)  # the cache holds the next call
    await _event(daemon, drain=False, type="snapshot_restore", session_id="t")
    sent = daemon.default.dispatcher.prefetcher
    await fake_lmcache.until(lambda: fake_lmcache.calls("prefetch"))  # its first part
    # Answered while the prefetch call is still held: the cancel never delays the event.
    await _event(
        daemon,
        drain=False,
        type="turn_end",
        session_id="t",
        kv_transfer_params={"chunk_hashes": hashes},
    )
    assert fake_lmcache.calls("cancel") == []
    await fake_lmcache.heal()
    await sent.drain(30)
    tag = fake_lmcache.calls("prefetch")[-1]["lookup_id"]
    assert [c["chunk_hashes"] for c in fake_lmcache.calls("prefetch")][-1] == ["b1", "b2"]
    assert fake_lmcache.calls("cancel") == [{"lookup_id": tag}]
    assert _cancelled(daemon) == {"stopped": (1.0, 3.0)}  # 2 skipped by the cache, 1 unsent


async def test_a_finished_prefetch_is_counted_ended(daemon, fake_lmcache):
    tag = await _restored(daemon, fake_lmcache)  # the fake loads it at once
    await _event(
        daemon, type="turn_end", session_id="s", kv_transfer_params={"chunk_hashes": HASHES}
    )
    assert fake_lmcache.calls("cancel") == [{"lookup_id": tag}]
    assert _cancelled(daemon) == {"ended": (1.0, 0.0)}
    await _event(
        daemon, type="turn_end", session_id="s", kv_transfer_params={"chunk_hashes": HASHES}
    )
    assert len(fake_lmcache.calls("cancel")) == 1  # nothing pending: nothing sent


async def test_a_stock_cache_is_asked_once_then_never(daemon, fake_lmcache):
    fake_lmcache.cancels = False  # a memory API without the route answers 404
    await _restored(daemon, fake_lmcache)
    await _event(
        daemon, type="turn_end", session_id="s", kv_transfer_params={"chunk_hashes": HASHES}
    )
    assert len(fake_lmcache.calls("cancel")) == 1
    assert daemon.default.dispatcher.prefetcher.cancels is False
    await _restored(daemon, fake_lmcache, sid="u", hashes=["c1"])
    await _event(
        daemon, type="turn_end", session_id="u", kv_transfer_params={"chunk_hashes": ["c1"]}
    )
    assert len(fake_lmcache.calls("cancel")) == 1
    assert _cancelled(daemon) == {}


async def test_a_prefetch_served_before_it_left_the_daemon_is_never_sent(daemon, fake_lmcache):
    dispatcher = daemon.default.dispatcher
    dispatcher.prefetch("v", ["d1", "d2"])  # queued in delivery, its task not run yet
    dispatcher.served("v")
    await dispatcher.drain()
    assert fake_lmcache.calls("prefetch") == [] and fake_lmcache.calls("cancel") == []
    assert _cancelled(daemon) == {"unsent": (1.0, 2.0)}


async def _mapped(svc, fake, sid="s", hashes=HASHES) -> None:
    """Session ``sid`` with ``hashes`` in its map, on disk only: a turn_start prefetches them."""
    fake.put(hashes, DISK)
    await _event(svc, type="turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes})


def _last_tag(fake) -> str:
    return fake.calls("prefetch")[-1]["lookup_id"]


async def test_a_late_turn_end_cancels_only_its_own_requests_prefetch(daemon, fake_lmcache):
    """Two overlapping requests of one session (issue 31 item 5): request n's turn_end,
    arriving after request n+1's turn_start, cancels n's prefetch, never n+1's."""
    fake_lmcache.hold_prefetches = True
    await _mapped(daemon, fake_lmcache)
    await _event(daemon, type="turn_start", session_id="s", request_id="req-n")
    first = _last_tag(fake_lmcache)
    await _event(daemon, type="turn_start", session_id="s", request_id="req-n1")
    second = _last_tag(fake_lmcache)
    assert first != second
    kv = {"chunk_hashes": HASHES}
    await _event(daemon, type="turn_end", session_id="s", request_id="req-n", kv_transfer_params=kv)
    assert fake_lmcache.calls("cancel") == [{"lookup_id": first}]
    assert list(fake_lmcache.held) == [second]  # n+1's still loading
    await _event(
        daemon, type="turn_end", session_id="s", request_id="req-n1", kv_transfer_params=kv
    )
    assert fake_lmcache.calls("cancel") == [{"lookup_id": first}, {"lookup_id": second}]
    assert fake_lmcache.held == {}


async def test_a_turn_end_without_request_id_ends_the_oldest_request(daemon, fake_lmcache):
    """Without request ids the turn_ends end the session's requests in order (FIFO)."""
    fake_lmcache.hold_prefetches = True
    await _mapped(daemon, fake_lmcache)
    await _event(daemon, type="turn_start", session_id="s")
    first = _last_tag(fake_lmcache)
    await _event(daemon, type="turn_start", session_id="s")
    second = _last_tag(fake_lmcache)
    kv = {"chunk_hashes": HASHES}
    await _event(daemon, type="turn_end", session_id="s", kv_transfer_params=kv)
    assert fake_lmcache.calls("cancel") == [{"lookup_id": first}]
    assert list(fake_lmcache.held) == [second]
    await _event(daemon, type="turn_end", session_id="s", kv_transfer_params=kv)
    assert fake_lmcache.calls("cancel") == [{"lookup_id": first}, {"lookup_id": second}]
    # A turn_start that prefetches nothing still begins a request: the turn_end that
    # follows the next turn_start is that one's, not the later request's.
    await _event(daemon, type="turn_start", session_id="s", prefetch=False)
    await _event(daemon, type="turn_start", session_id="s")
    third = _last_tag(fake_lmcache)
    await _event(daemon, type="turn_end", session_id="s", kv_transfer_params=kv)
    assert len(fake_lmcache.calls("cancel")) == 2 and list(fake_lmcache.held) == [third]
    await _event(daemon, type="turn_end", session_id="s", kv_transfer_params=kv)
    assert fake_lmcache.calls("cancel")[-1] == {"lookup_id": third}


async def test_a_request_ends_its_restore_and_its_turn_starts_prefetch(daemon, fake_lmcache):
    """One request (a restore, then its turn_start): its turn_end cancels both, as before
    request ids; a restore sent without one is the next request's, whatever id it carries."""
    fake_lmcache.hold_prefetches = True
    restored = await _restored(daemon, fake_lmcache)
    await _event(daemon, type="turn_start", session_id="s")
    started = _last_tag(fake_lmcache)
    kv = {"chunk_hashes": HASHES}
    await _event(daemon, type="turn_end", session_id="s", kv_transfer_params=kv)
    assert fake_lmcache.calls("cancel") == [{"lookup_id": restored}, {"lookup_id": started}]
    # The proxy's shape: an untagged restore, a turn_start with no prefetch and an id.
    await _event(daemon, type="session_suspend", session_id="s")
    await _event(daemon, type="snapshot_restore", session_id="s")
    again = _last_tag(fake_lmcache)
    await _event(daemon, type="turn_start", session_id="s", request_id="r", prefetch=False)
    await _event(daemon, type="turn_end", session_id="s", request_id="r", kv_transfer_params=kv)
    assert fake_lmcache.calls("cancel")[-1] == {"lookup_id": again}
    assert fake_lmcache.held == {}


async def test_prefetch_tags_never_repeat_across_restarts(tmp_path, fake_lmcache):
    """A restarted daemon's prefetches are not named as the last run's were: a cancel of
    a new one never stops an old one the cache still holds, nor the reverse."""
    db = str(tmp_path / "s.db")
    tags: list[str] = []
    for _ in range(2):
        svc = build(
            Config(session_store_path=db),
            SqliteSessionStore(db),
            LMCacheBackend(fake_lmcache.url),
        )
        await svc.start()
        try:
            await _mapped(svc, fake_lmcache)
            await _event(svc, type="turn_start", session_id="s")
            tags.append(_last_tag(fake_lmcache))
        finally:
            await svc.stop()
            await svc.backend.close()
    assert tags[0] != tags[1]
    assert all(re.fullmatch(r"prefetch_s:[0-9a-z]+:1", t) for t in tags), tags
