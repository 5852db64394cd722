"""event_id: a retried event returns its first answer and changes state once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support.daemon_app import DaemonClient
from support.daemon_proc import DaemonProcess
from support.reliability import daemon_state


def te(sid: str, hashes: list[str], event_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "turn_end",
        "session_id": sid,
        "kv_transfer_params": {"chunk_hashes": hashes},
    }
    if event_id is not None:
        body["event_id"] = event_id
    return body


async def turns(d: DaemonClient, sid: str) -> int:
    rows = (await d.ok("list_sessions"))["sessions"]
    return next(r["turn_count"] for r in rows if r["session_id"] == sid)


async def test_same_event_id_twice_same_answer_one_change(daemon_app: DaemonClient) -> None:
    d = daemon_app
    s1, first = await d.post(te("s", ["a", "b"], "e1"))
    assert s1 == 200 and first["ok"] is True
    _, second = await d.post(te("s", ["a", "b"], "e1"))
    assert second == first
    assert await turns(d, "s") == 1
    # A retry of a turn_end that evicted: same evicted_count, nothing evicted twice.
    _, drop = await d.post(te("s", ["b"], "e2"))
    _, again = await d.post(te("s", ["b"], "e2"))
    assert drop == again and drop["data"]["evicted_count"] == 1
    assert await turns(d, "s") == 2
    # The same id with another body is not a retry: refused, naming the id, nothing changed.
    _, other = await d.post(te("s", ["zzz"], "e2"))
    assert (
        other["ok"] is False
        and "event_id 'e2' was already used for a different" in (other["error"])
    )
    assert (await d.ok("session_map", session_id="s"))["chunk_hashes"] == ["b"]
    # Without event_id, a repeat is a new event.
    await d.post(te("s", ["b"]))
    await d.post(te("s", ["b"]))
    assert await turns(d, "s") == 4
    d.assert_consistent()


@pytest.mark.parametrize(
    "type_",
    ["session_fork", "session_fork_end", "session_close", "session_suspend", "snapshot_restore"],
)
async def test_every_write_event_is_idempotent(daemon_app: DaemonClient, type_: str) -> None:
    d = daemon_app
    await d.turn_end("s", ["a", "b"])
    await d.ok("session_fork", session_id="s")
    if type_ == "snapshot_restore":
        await d.ok("session_suspend", session_id="s")
    before = daemon_state(d.daemon)
    _, first = await d.post({"type": type_, "session_id": "s", "event_id": f"id-{type_}"})
    after = daemon_state(d.daemon)
    assert first["ok"] is True and after != before
    for _ in range(3):
        _, again = await d.post({"type": type_, "session_id": "s", "event_id": f"id-{type_}"})
        assert again == first
    assert daemon_state(d.daemon) == after
    d.assert_consistent()


async def test_concurrent_duplicates_apply_once(daemon_app: DaemonClient) -> None:
    d = daemon_app
    answers = await asyncio.gather(
        *(d.post(te("s", [f"h{i}" for i in range(50)], "dup")) for _ in range(40))
    )
    assert all(a == answers[0] for a in answers)
    assert answers[0][1]["ok"] is True
    assert await turns(d, "s") == 1
    forks = await asyncio.gather(
        *(
            d.post({"type": "session_fork", "session_id": "s", "event_id": "fork-1"})
            for _ in range(20)
        )
    )
    assert all(f == forks[0] for f in forks)
    assert len(d.daemon.default.manager.forks.of("s")) == 1
    assert forks[0][1]["data"] == {"forked": True, "fork_id": 1}  # one fork, one id
    d.assert_consistent()


@pytest.mark.parametrize("bad", [1, 1.5, True, None, [], {}, "", "x" * 201, "ok\ud800"])
async def test_bad_event_id_is_refused(daemon_app: DaemonClient, bad: Any) -> None:
    d = daemon_app
    status, body = await d.post({**te("s", ["a"]), "event_id": bad})
    assert status == 200 and body["ok"] is False and "data" not in body
    assert "event_id must be" in body["error"]
    assert "s" not in d.daemon.default.manager.sessions


def test_event_ids_survive_kill_9(daemon_proc_factory: Callable[..., DaemonProcess]) -> None:
    d = daemon_proc_factory()
    _, first = d.post(te("s", ["a", "b"], "k1"))
    _, fork = d.post({"type": "session_fork", "session_id": "s", "event_id": "k2"})
    _, close = d.post({"type": "session_close", "session_id": "t", "event_id": "k3"})
    assert first["ok"] and fork["ok"] and close["ok"]
    d.kill()
    d.start()
    assert d.post(te("s", ["a", "b"], "k1"))[1] == first
    assert d.post({"type": "session_fork", "session_id": "s", "event_id": "k2"})[1] == fork
    rows = d.event("list_sessions")["data"]["sessions"]
    assert [(r["session_id"], r["turn_count"], r["fork_holds"]) for r in rows] == [("s", 1, 1)]
    d.stop()  # a clean stop too
    d.start()
    assert d.post(te("s", ["a", "b"], "k1"))[1] == first
    assert d.event("list_sessions")["data"]["sessions"][0]["turn_count"] == 1


async def test_window_is_bounded(start_daemon: Any, make_config: Any) -> None:
    d = await start_daemon(make_config(idempotency_window=5))
    for i in range(8):
        await d.post(te("s", [f"h{i}"], f"w{i}"))
    assert len(d.daemon.answers) == 5
    _, late = await d.post(te("s", ["h7"], "w7"))  # still remembered
    assert await turns(d, "s") == 8 and late["ok"]
    await d.post(te("s", ["h0"], "w0"))  # forgotten: applied again (documented)
    assert await turns(d, "s") == 9


@pytest.fixture
async def daemon_app(start_daemon: Any) -> DaemonClient:
    """An in-process daemon, default test config."""
    return await start_daemon()
