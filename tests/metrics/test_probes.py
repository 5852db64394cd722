"""GET /healthz and GET /readyz of a real daemon process: each check named, 200 or 503."""

from __future__ import annotations

import asyncio
import time

from support.daemon_proc import DaemonProcess, free_port

from ramakv_sdk.version import package_version

POLL_S = 30.0


def te(d: DaemonProcess, sid: str, hashes: list[str]) -> dict:
    return d.event("turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": hashes})


def wait_ready(d: DaemonProcess, status: int) -> dict:
    """Poll /readyz until it answers ``status`` (backend state changes asynchronously)."""
    deadline = time.monotonic() + POLL_S
    while True:
        got, body = d.get("/readyz")
        if got == status or time.monotonic() > deadline:
            assert got == status, body
            return body
        time.sleep(0.05)


def test_noop_daemon_is_alive_and_ready(daemon_proc: DaemonProcess) -> None:
    status, body = daemon_proc.get("/healthz")
    token = body.pop("store_lock")  # the token of its hold on the store's lock
    assert status == 200 and body == {"ok": True, "status": "alive", "version": package_version()}
    lock = daemon_proc.store.parent / (daemon_proc.store.name + ".lock")
    assert lock.read_text().split() == [str(daemon_proc.proc.pid), "ram-a-kv", token]
    status, body = daemon_proc.get("/readyz")
    assert status == 200 and body["ok"] is True
    assert set(body["checks"]) == {"store", "backend", "outbox"}
    assert all(c["ok"] for c in body["checks"].values())
    assert "noop" in body["checks"]["backend"]["detail"]


def test_unreachable_backend_and_outbox_over_its_bound(daemon_proc_factory) -> None:
    d = daemon_proc_factory(
        noop=False,
        config={
            "lmcache_url": f"http://127.0.0.1:{free_port()}",  # nothing listens there
            "ready_max_evict_backlog": 1,
            "backend_timeout_s": 1.0,
        },
    )
    assert d.get("/healthz")[0] == 200  # alive all the same
    body = wait_ready(d, 503)
    assert body["checks"]["backend"]["ok"] is False
    assert "query failed" in body["checks"]["backend"]["detail"]
    assert body["checks"]["store"]["ok"] is True and body["checks"]["outbox"]["ok"] is True
    assert te(d, "s", ["a", "b"])["ok"] and te(d, "s", [])["ok"]  # two evictions wait
    body = wait_ready(d, 503)
    outbox = body["checks"]["outbox"]
    assert outbox["ok"] is False and "2 evictions wait for delivery (> 1)" in outbox["detail"]


async def test_backend_answering_makes_it_ready(daemon_proc_factory, fake_lmcache) -> None:
    d = await asyncio.to_thread(
        daemon_proc_factory, noop=False, config={"lmcache_url": fake_lmcache.url}
    )
    status, body = await asyncio.to_thread(d.get, "/readyz")
    assert status == 200, body
    assert body["checks"]["backend"] == {"ok": True, "detail": "answers queries (lmcache)"}
    await fake_lmcache.set_failure("slow", delay=5.0)  # hangs past the probe's 2 s
    body = await asyncio.to_thread(wait_ready, d, 503)
    assert body["checks"]["backend"] == {"ok": False, "detail": "no answer to a query within 2 s"}
    await fake_lmcache.set_failure("503")
    body = await asyncio.to_thread(wait_ready, d, 503)
    assert body["checks"]["backend"]["detail"].startswith("query failed: 503")
    await fake_lmcache.heal()
    await asyncio.to_thread(wait_ready, d, 200)


def test_probes_need_the_token_when_one_is_set(daemon_proc_factory) -> None:
    d = daemon_proc_factory(config={"auth_token": "s3cret"})
    assert d.get("/readyz")[0] == 200  # DaemonProcess sends the config's token
    d.auth_token = None
    assert d.get("/healthz")[0] == 401 and d.get("/readyz")[0] == 401
