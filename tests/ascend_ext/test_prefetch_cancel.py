"""Cancelling a prefetch on a real lmcache 0.5.6 CPU engine: queued, running, finished."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("lmcache")
pytestmark = pytest.mark.lmcache

import httpx  # noqa: E402
from support.memapi_rig import CPU, DISK, cpu_engine, on_disk, serve, tokens, wait_prefetch  # noqa: E402
from support.reliability import wait_for  # noqa: E402

from ascend_ext.memory_api import ops_for  # noqa: E402
from ascend_ext_dev.devserver import create_app  # noqa: E402


@pytest.fixture
def api(tmp_path) -> Iterator[tuple[httpx.Client, Any]]:
    """(client, engine) for a devserver app on a loopback port with a fresh disk dir."""
    with cpu_engine(tmp_path / "disk", ddr_mb=4) as engine, serve(create_app(engine)) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, engine


def _query(client: httpx.Client, hashes: list[str]) -> dict[str, list[str]]:
    return client.post("/memory/query", json={"chunk_hashes": hashes}).json()


def _on_disk_only(client: httpx.Client, n: int) -> list[str]:
    """Store ``n`` chunks, wait for their disk copies, then drop them from DDR."""
    r = client.post("/engine/turn", json={"token_ids": tokens(n)})
    hashes = r.json()["kv_transfer_params"]["chunk_hashes"]
    assert wait_for(lambda: on_disk(client, hashes), every=0.02), "disk writes did not land"
    client.post("/memory/evict", json={"chunk_hashes": hashes, "locations": [CPU]})
    assert _query(client, hashes) == {h: [DISK] for h in hashes}
    return hashes


def _cancel(client: httpx.Client, lookup_id: Any) -> httpx.Response:
    return client.post("/memory/prefetch/cancel", json={"lookup_id": lookup_id})


def _hold_worker(engine: Any) -> tuple[threading.Event, threading.Thread]:
    """Occupy the memory API's worker thread until the returned gate is set."""
    ops, started, gate = ops_for(engine), threading.Event(), threading.Event()

    def block() -> None:
        started.set()
        gate.wait()

    thread = threading.Thread(target=ops.run_serial, args=(block,), daemon=True)
    thread.start()
    started.wait()
    return gate, thread


def test_a_queued_prefetch_cancelled_never_loads(api):
    client, engine = api
    hashes = _on_disk_only(client, 3)
    gate, thread = _hold_worker(engine)
    try:
        r = client.post("/memory/prefetch", json={"chunk_hashes": hashes, "lookup_id": "s1:1"})
        assert r.status_code == 200
        assert client.get("/memory/prefetch/s1:1").json()["state"] == "queued"
        r = _cancel(client, "s1:1")
        assert r.status_code == 200
        assert r.json() == {"status": "success", "lookup_id": "s1:1", "cancelled": 1, "skipped": 3}
        assert client.get("/memory/prefetch/s1:1").json()["state"] == "cancelled"
    finally:
        gate.set()
        thread.join()
    ops_for(engine).run_serial(lambda: None)  # the worker has passed the cancelled prefetch
    status = client.get("/memory/prefetch/s1:1").json()
    assert status["state"] == "cancelled" and status["loaded"] == 0 and status["skipped"] == 3
    assert _query(client, hashes) == {h: [DISK] for h in hashes}  # nothing came up
    assert _cancel(client, "s1:1").json()["cancelled"] == 0  # a repeat stops nothing


def _gate_loads(engine: Any) -> tuple[threading.Event, threading.Event, Callable[[], None]]:
    """Make the StorageManager's first get() wait: (inside, release, undo)."""
    sm = engine.storage_manager
    original = sm.get
    inside, release = threading.Event(), threading.Event()

    def get(*args: Any, **kwargs: Any) -> Any:
        if not inside.is_set():
            inside.set()
            release.wait()
        return original(*args, **kwargs)

    sm.get = get

    def undo() -> None:
        release.set()
        sm.get = original

    return inside, release, undo


def test_a_running_prefetch_stops_before_its_next_chunk(api):
    client, engine = api
    hashes = _on_disk_only(client, 4)
    inside, release, undo = _gate_loads(engine)
    try:
        r = client.post("/memory/prefetch", json={"chunk_hashes": hashes, "lookup_id": "s1:2"})
        assert r.status_code == 200
        inside.wait()  # the worker is loading the first chunk
        assert client.get("/memory/prefetch/s1:2").json()["state"] == "running"
        r = _cancel(client, "s1:2")
        assert r.json() == {"status": "success", "lookup_id": "s1:2", "cancelled": 1, "skipped": 3}
        release.set()
        status = wait_prefetch(client, "s1:2")
    finally:
        undo()
    assert status["state"] == "cancelled"
    assert status["loaded"] == 1 and status["skipped"] == 3 and status["num_chunks"] == 4
    got = _query(client, hashes)
    assert got[hashes[0]] == [CPU, DISK]  # the chunk under way was loaded; it stays
    assert all(got[h] == [DISK] for h in hashes[1:])


def test_a_finished_or_unknown_prefetch_cancels_nothing(api):
    client, _ = api
    hashes = _on_disk_only(client, 2)
    client.post("/memory/prefetch", json={"chunk_hashes": hashes, "lookup_id": "s1:3"})
    assert wait_prefetch(client, "s1:3")["state"] == "done"
    for lookup_id in ("s1:3", "never-sent"):
        r = _cancel(client, lookup_id)
        assert r.status_code == 200
        assert r.json() == {
            "status": "success",
            "lookup_id": lookup_id,
            "cancelled": 0,
            "skipped": 0,
        }
    assert client.get("/memory/prefetch/s1:3").json()["state"] == "done"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "missing required field 'lookup_id'"),
        ({"lookup_id": 7}, "field 'lookup_id' must be a non-empty string"),
        ({"lookup_id": ""}, "field 'lookup_id' must be a non-empty string"),
        ([], "body must be a JSON object"),
    ],
)
def test_a_bad_cancel_is_refused_by_name(api, body, error):
    client, _ = api
    r = client.post("/memory/prefetch/cancel", json=body)
    assert r.status_code == 400 and r.json() == {"error": error}
