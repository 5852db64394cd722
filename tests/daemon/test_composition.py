"""The composition root: an event is one handler and its declared effects, the answer stored
for an event_id is the reply sent, HTTP modules import no app, subscribers close once."""

from __future__ import annotations

import ast
import json
import sqlite3
from pathlib import Path
from typing import Any

from support.daemon_app import RecordingBackend, StartDaemon

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import build
from ramakv_daemon.bus.commands import (
    AdoptSession,
    CheckOwners,
    DemoteOverBudget,
    ReleaseSession,
    SettleOwed,
)
from ramakv_daemon.bus.messagebus import MessageBus
from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.commit.record import ChangeRecord, CommitMeter, Reply, Subscriber
from ramakv_daemon.config import Config
from ramakv_daemon.core.budget import Turn
from ramakv_daemon.core.catalogue import EventSpec, session_id_of
from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers import DEFAULT_REGISTRY, Handler, HandlerContext, Registry
from ramakv_daemon.handlers.registry import Effects
from ramakv_daemon.pipeline.outcome import Outcome

HTTP = Path(__file__).resolve().parents[2] / "ramakv_daemon" / "http"


def session_pin(ctx: HandlerContext, payload: dict[str, Any], now: float) -> Change:
    """A made-up event: prefetch the session's map, as a turn begins."""
    s = ctx.manager.get(session_id_of(payload))
    return Change(data={"pinned": True}, prefetch=list(s.unique_hashes()))


def registry_with_pin() -> Registry:
    registry = Registry()
    for spec in DEFAULT_REGISTRY.specs():
        registry.register(DEFAULT_REGISTRY.get(spec.name))
    registry.register(
        Handler(
            EventSpec("session_pin", "Pin a session's map in DDR", ("session_id",)),
            session_pin,
            effects=Effects(turn=Turn.START),
        )
    )
    return registry


async def test_a_new_event_is_its_handler_and_its_declared_effects(tmp_path: Path) -> None:
    cfg = Config(session_store_path=str(tmp_path / "s.db"), ddr_budget_chunks=100)
    backend = RecordingBackend()
    d = build(
        cfg, SqliteSessionStore(cfg.session_store_path), backend, registry=registry_with_pin()
    )
    await d.start()
    try:
        end = {
            "type": "turn_end",
            "session_id": "s",
            "kv_transfer_params": {"chunk_hashes": ["a", "b"]},
        }
        assert (await d.handle(end))[0] == 200
        seq = d.trace.seq
        status, body = await d.handle({"type": "session_pin", "session_id": "s"})
        assert (status, body) == (
            200,
            {"ok": True, "type": "session_pin", "data": {"pinned": True}},
        )
        assert "s" in d.default.budget.in_flight  # Turn.START: the budget pins the session
        await d.default.dispatcher.drain()
        assert backend.of("prefetch") == ["a", "b"]
        records = [json.loads(t) for t in d.trace.replay(seq) or []]
        assert [(r["type"], r["prefetch"]) for r in records] == [("session_pin", ["a", "b"])]
        listed = (await d.handle({"type": "list_events"}))[1]["data"]["admin_events"]
        assert listed["session_pin"]["required"] == ["session_id"]
        assert b'ramakv_events_total{outcome="ok",type="session_pin"} 1.0' in d.metrics.render()
    finally:
        await d.stop()


async def test_the_stored_answer_is_the_reply_sent(
    start_daemon: StartDaemon, make_config: Any
) -> None:
    d = await start_daemon(make_config(debug_enabled=True))
    ctx = {"messages": [{"role": "user", "content": "hi"}]}
    _, reply = await d.post(
        {
            "type": "turn_end",
            "event_id": "e1",
            "session_id": "s",
            "kv_transfer_params": {"chunk_hashes": ["a"]},
            "debug_context": ctx,
        }
    )
    assert reply["data"]["debug_written"] is True
    con = sqlite3.connect(d.config.session_store_path)
    try:
        stored = con.execute("SELECT response_json FROM event_ids WHERE event_id = 'e1'").fetchall()
    finally:
        con.close()
    assert [json.loads(row[0]) for row in stored] == [reply]  # one row: stored once, final


def test_no_http_module_imports_the_app() -> None:
    """The app builds the routes from the handlers; the handlers reach the daemon through
    http/keys.py, so nothing imports http/app.py back (no import cycle)."""
    for path in HTTP.glob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
        assert "ramakv_daemon.http.app" not in imported, path.name


async def test_trace_subscribers_are_closed_once_at_shutdown(start_daemon: StartDaemon) -> None:
    d = await start_daemon()
    hub = d.daemon.trace
    calls: list[str] = []
    close_all = hub.close_all

    def counted(reason: str) -> None:
        calls.append(reason)
        close_all(reason)

    hub.close_all = counted  # type: ignore[method-assign]
    ws = await d.client.ws_connect("/trace?protocol=2")
    assert json.loads((await ws.receive()).data)["kind"] == "snapshot"
    await d.close()
    assert calls == ["daemon shutting down"]


def test_the_committer_tells_only_its_own_port(tmp_path: Path) -> None:
    """The committer knows its subscribers as commit/'s Subscriber port, the ledger first;
    the composition root gives it the trace records and the notices (no bound method of a
    higher layer's object)."""
    cfg = Config(session_store_path=str(tmp_path / "s.db"))
    d = build(cfg, SqliteSessionStore(cfg.session_store_path), RecordingBackend())
    subscribers = d.committer.subscribers
    assert all(isinstance(s, Subscriber) for s in subscribers)
    assert subscribers == (d.committer.ledger, d.records, d.ownership.notices)


def test_the_committer_meters_through_its_own_port(tmp_path: Path) -> None:
    """A commit's time and batch size go to commit/'s CommitMeter port (the metrics
    implement it), never a bare callable handed in."""
    cfg = Config(session_store_path=str(tmp_path / "s.db"))
    d = build(cfg, SqliteSessionStore(cfg.session_store_path), RecordingBackend())
    assert isinstance(d.metrics, CommitMeter) and d.committer.meter is d.metrics
    assert "on_commit" not in GroupCommitter.__init__.__code__.co_varnames


async def test_the_committer_reads_replies_through_its_own_port(
    start_daemon: StartDaemon, make_config: Any
) -> None:
    """Each event a record commits is commit/'s Reply port by name (Outcome subclasses
    it), not whatever has an answer(): the committer reads it, the pipeline implements it."""
    d = await start_daemon(make_config())
    committer = d.daemon.committer
    records: list[ChangeRecord] = []
    submit = committer.submit

    def seen(record: ChangeRecord) -> Any:
        records.append(record)
        return submit(record)

    committer.submit = seen  # type: ignore[method-assign]
    body = {"type": "turn_end", "event_id": "e1", "session_id": "s"}
    _, reply = await d.post({**body, "kv_transfer_params": {"chunk_hashes": ["a"]}})
    assert reply["ok"] is True
    (record,) = records
    assert [type(r) for r in record.replies] == [Outcome] and Reply in Outcome.__mro__
    assert not getattr(Reply, "_is_protocol", False)  # nominal: a shape alone is no Reply


def test_every_command_has_a_handler_built_with_the_bus() -> None:
    """Ownership's commands are the bus's too, an adopt and a settlement among them, and
    so is the DDR budget's pass; the bus builds its handlers as it is built (nothing is
    registered or bound afterwards)."""
    d = build(Config(session_store_path=":memory:"), backend=RecordingBackend())
    commands = {AdoptSession, CheckOwners, ReleaseSession, SettleOwed, DemoteOverBudget}
    assert commands <= set(d.bus.handlers)
    assert "handlers" in MessageBus.__init__.__code__.co_varnames
    assert not hasattr(MessageBus, "register")
