"""Client events first: background events (the idle sweep's, fork expiry) wait in their own
lane, a few in flight, and a client event is served before the background events queued."""

from __future__ import annotations

import asyncio

import pytest
from support.daemon_app import DaemonClient

from ramakv_daemon.pipeline.lanes import Lanes


async def test_background_waits_while_a_client_event_is_in_flight() -> None:
    lanes = Lanes(in_flight=1, client_share=3)
    order: list[str] = []
    release = asyncio.Event()

    async def bg(name: str) -> None:
        async with lanes.background():
            order.append(name)
            await release.wait()

    first = asyncio.create_task(bg("b1"))
    await asyncio.sleep(0)
    assert order == ["b1"]  # nothing else in flight: admitted at once
    rest = [asyncio.create_task(bg(f"b{i}")) for i in (2, 3)]
    with lanes.client():
        release.set()
        await first
        for _ in range(5):
            await asyncio.sleep(0)
        assert order == ["b1"] and lanes.background_waiting == 2  # the client holds them
    await asyncio.gather(*rest)
    assert order == ["b1", "b2", "b3"]


async def test_under_sustained_client_load_background_gets_its_share() -> None:
    lanes = Lanes(in_flight=1, client_share=3)
    admitted: list[int] = []
    served = 0

    async def bg(i: int) -> None:
        async with lanes.background():
            admitted.append(served)

    with lanes.client():  # a client always in flight: the lane opens by share only
        tasks = [asyncio.create_task(bg(i)) for i in range(3)]
        await asyncio.sleep(0)
        assert admitted == []
        for _ in range(9):
            with lanes.client():
                served += 1
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
    assert admitted == [3, 6, 9]  # one background event per 3 client events


async def test_a_cancelled_waiter_gives_its_turn_away() -> None:
    lanes = Lanes(in_flight=1)
    gate = asyncio.Event()

    async def hold() -> None:
        async with lanes.background():
            await gate.wait()

    async def quick() -> str:
        async with lanes.background():
            return "ran"

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(quick())
    later = asyncio.create_task(quick())
    await asyncio.sleep(0)
    cancelled.cancel()
    gate.set()
    assert await later == "ran"
    await holder
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert lanes.background_running == 0


async def test_a_queue_of_cancelled_waiters_does_not_block_a_newcomer() -> None:
    lanes = Lanes(in_flight=1, share=1.0)
    gate = asyncio.Event()

    async def hold() -> None:
        async with lanes.background():
            await gate.wait()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    gone = asyncio.create_task(_enter(lanes))
    await asyncio.sleep(0)
    gone.cancel()
    gate.set()
    await holder
    with pytest.raises(asyncio.CancelledError):
        await gone
    await _enter(lanes)  # only a cancelled waiter ahead of it: admitted at once
    assert lanes.background_running == 0 and lanes.background_waiting == 0


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Lanes(in_flight=0)


async def test_a_client_event_is_served_before_queued_background_events(
    daemon: DaemonClient,
) -> None:
    for i in range(10):
        await daemon.turn_end(f"s{i}", ["sys", f"own-{i}"])
    d = daemon.daemon
    done: list[str] = []

    async def background(sid: str) -> None:
        status, body = await d.background_run({"type": "session_suspend", "session_id": sid}, None)
        assert body["ok"], body
        done.append(sid)

    async def client() -> None:
        status, body = await d.handle({"type": "turn_end", "session_id": "c"} | HASHES)
        assert body["ok"], body
        done.append("client")

    sweep = [asyncio.create_task(background(f"s{i}")) for i in range(10)]
    await asyncio.sleep(0)  # the sweep's first events are admitted and applying
    in_flight = d.lanes.background_running
    assert 0 < in_flight < 10 and d.lanes.background_waiting == 10 - in_flight
    await client()
    await asyncio.gather(*sweep)
    # Only what was admitted before the client came finished before it.
    assert done.index("client") <= in_flight
    assert sorted(done) == sorted(["client"] + [f"s{i}" for i in range(10)])
    daemon.assert_consistent()


HASHES = {"kv_transfer_params": {"chunk_hashes": ["sys", "new"]}}


async def test_while_clients_are_active_background_pauses_for_its_own_cost() -> None:
    now, cpu = [100.0], [5.0]
    lanes = Lanes(in_flight=1, share=0.5, clock=lambda: now[0], cpu_clock=lambda: cpu[0])
    with lanes.client():
        pass  # a client answered just now: clients are active
    async with lanes.background():
        cpu[0] += 0.004  # the event cost the loop 4 ms
    assert not lanes._may_admit()  # shut for 4 ms more (share 0.5)
    second = asyncio.create_task(_enter(lanes))
    await asyncio.sleep(0)
    assert not second.done() and lanes.background_waiting == 1
    now[0] += 0.004
    await second  # reopened once its pause has passed
    now[0] += 5.0  # no client for a while: no pause at all
    async with lanes.background():
        cpu[0] += 1.0
    assert lanes._may_admit()


async def _enter(lanes: Lanes) -> None:
    async with lanes.background():
        pass


async def test_a_background_batch_is_written_off_the_loop(daemon: DaemonClient) -> None:
    import threading

    d = daemon.daemon
    store = d.store
    seen: list[bool] = []
    write_sync = store._write_sync  # type: ignore[attr-defined]

    def spy(*args: object) -> None:
        seen.append(threading.current_thread() is threading.main_thread())
        write_sync(*args)

    store._write_sync = spy  # type: ignore[attr-defined]
    await daemon.turn_end("a", ["sys", "x"])
    await d.background_run({"type": "session_suspend", "session_id": "a"}, None)
    await daemon.turn_end("b", ["sys", "y"])
    # Client commits inline, the background one on the thread (delivery's retired rows
    # are committed inline between them, alone).
    assert seen[0] and seen[-1] and seen.count(False) == 1
