"""The DDR budget's demotions are a DemoteOverBudget command through the bus: the budget
policy (a reaction of the event) only finds a pass due, the command's handler plans and
applies it, in the event's own loop step, before the event's prefetch; a handler that
demotes nothing leaves every session in DDR."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from support.bus_record import record_commands
from support.daemon_app import RecordingBackend

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import Daemon, build
from ramakv_daemon.bus.commands import ClientEvent, DemoteOverBudget
from ramakv_daemon.config import Config
from ramakv_daemon.pipeline.unit_of_work import UnitOfWork


class Clock:
    """The wall clock the daemon reads, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, RecordingBackend, Clock]]:
    cfg = Config(
        session_store_path=str(tmp_path / "s.db"),
        ddr_budget_chunks=4,
        budget_check_interval_s=0.0,
    )
    backend, clock = RecordingBackend(), Clock()
    d = build(cfg, SqliteSessionStore(cfg.session_store_path), backend, clock=clock)
    await d.start()
    try:
        yield d, backend, clock
    finally:
        await d.stop()


async def event(d: Daemon, clock: Clock, type_: str, sid: str, hashes: Sequence[str] = ()) -> None:
    clock.now += 1.0  # each event a distinct last_event_ts: the retention order is fixed
    payload: dict[str, Any] = {"type": type_, "session_id": sid}
    if hashes:
        payload["kv_transfer_params"] = {"chunk_hashes": list(hashes)}
    status, body = await d.handle(payload)
    assert status == 200 and body["ok"], body


async def test_a_pass_is_a_command_through_the_bus_after_its_event(
    daemon: tuple[Daemon, RecordingBackend, Clock],
) -> None:
    d, backend, clock = daemon
    handled = record_commands(d, ClientEvent, DemoteOverBudget)
    await event(d, clock, "turn_end", "s1", ["01", "02"])
    await event(d, clock, "turn_end", "s2", ["03", "04"])  # 4 chunks: at the budget
    seq = d.trace.seq
    await event(d, clock, "turn_end", "s3", ["05", "01"])  # 5 > 4: s1 is the longest idle
    names = [name for name, _ in handled]
    assert names == ["ClientEvent", "ClientEvent", "ClientEvent", "DemoteOverBudget"]
    record_ = handled[-1][1]
    assert (record_["victims"], record_["demote"], record_["ts"]) == (["s1"], ["02"], clock.now)
    assert d.default.budget.demoted == {"s1"}
    # The pass's trace record follows its event's, as it did when the pass was a reaction.
    traced = [json.loads(t) for t in d.trace.replay(seq) or []]
    assert [r.get("type", r.get("kind")) for r in traced] == ["turn_end", "budget"]
    assert traced[1] == record_

    # s1 back: prefetched whole, and s2 demoted instead; the demotion goes out first.
    await d.default.dispatcher.drain()
    backend.calls.clear()
    await event(d, clock, "turn_start", "s1")
    assert [name for name, _ in handled[4:]] == ["ClientEvent", "DemoteOverBudget"]
    await d.default.dispatcher.drain()
    assert backend.calls == [("demote", ["03", "04"]), ("prefetch", ["01", "02"])]
    assert d.default.budget.demoted == {"s2"}


async def test_nothing_but_the_command_demotes(
    daemon: tuple[Daemon, RecordingBackend, Clock],
) -> None:
    d, backend, clock = daemon
    sent: list[DemoteOverBudget] = []

    async def demotes_nothing(command: DemoteOverBudget, uow: UnitOfWork) -> None:
        sent.append(command)

    d.bus.handlers[DemoteOverBudget] = demotes_nothing
    await event(d, clock, "turn_end", "s1", ["01", "02"])
    await event(d, clock, "turn_end", "s2", ["03", "04"])
    seq = d.trace.seq
    await event(d, clock, "turn_end", "s3", ["05", "01"])
    assert sent == [DemoteOverBudget(d.namespaces.default, clock.now)]
    await d.default.dispatcher.drain()
    assert d.default.budget.demoted == set() and backend.of("demote") == []
    traced = [json.loads(t) for t in d.trace.replay(seq) or []]
    assert [r.get("type", r.get("kind")) for r in traced] == ["turn_end"]
