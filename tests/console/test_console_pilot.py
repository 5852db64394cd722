"""Pilot tests: the console driving a real daemon process on a loopback port."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.console_rig import until
from textual.widgets import Input, Switch, TextArea

from ramakv_console.messages import Chunks, Config, Daemon, Sessions
from ramakv_console.screens.confirm import ConfirmDialog
from ramakv_console.screens.fire_event import FireEventScreen
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.event_form import EventForm
from ramakv_console.widgets.refcount_table import RefcountTable
from ramakv_console.widgets.session_table import SessionTable


def shown(app: Any, selector: str) -> str:
    """What the widget at ``selector`` renders now ("" while the screen has none)."""
    found = app.screen.query(selector)
    return str(found.first().render()) if found else ""


SIZE = (140, 40)


def turn_end(sid: str, hashes: list[str]) -> dict[str, Any]:
    return {"type": "turn_end", "session_id": sid, "kv_transfer_params": {"chunk_hashes": hashes}}


async def test_fire_turn_end_from_the_form_adds_the_row(real_app: Any) -> None:
    app = real_app()
    seen: list[Any] = []
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await until(
            pilot,
            lambda: app.connection[0] and "turn_end" in app.catalogue,
            what="connection and list_events",
        )
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, FireEventScreen))
        form = app.screen.query_one(EventForm)
        await until(pilot, lambda: form.event_type == "turn_end", what="turn_end form")
        form.query_one("#field-session_id", Input).value = "s-form"
        form.query_one("#field-kv_transfer_params", TextArea).text = "sys\nh1\nh2\n"
        await pilot.press("ctrl+s")
        await until(
            pilot,
            lambda: any(
                isinstance(m, Daemon.EventAnswered) and m.event["type"] == "turn_end" for m in seen
            ),
        )
        answered = next(
            m for m in seen if isinstance(m, Daemon.EventAnswered) and m.event["type"] == "turn_end"
        )
        assert answered.event == turn_end("s-form", ["sys", "h1", "h2"])
        assert answered.envelope["ok"] is True
        assert '"map_updated": true' in str(app.screen.query_one("#answer").render())
        await pilot.press("escape", "1")  # out of the field first: "1" would be typed
        table = app.screen.query_one(SessionTable)
        await until(pilot, lambda: "s-form" in table.rows, what="row for s-form")
        row = table.get_row("s-form")
        assert str(row[1]) == "active" and row[2] == 1 and row[3] == 3


async def test_invalid_json_is_refused_before_sending(real_app: Any) -> None:
    app = real_app()
    seen: list[Any] = []
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await until(pilot, lambda: "turn_end" in app.catalogue)
        await pilot.press("4")
        form = app.screen.query_one(EventForm)
        await until(pilot, lambda: form.event_type == "turn_end")
        form.query_one("#field-session_id", Input).value = "s"
        form.query_one("#field-kv_transfer_params", TextArea).text = "h"
        form.query_one("#field-debug_context", TextArea).text = "{broken"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "invalid JSON" in shown(app, "#form-error"), what="error")
        assert not any(
            isinstance(m, Daemon.EventAnswered) and m.event["type"] == "turn_end" for m in seen
        )


async def test_suspend_from_the_table_drops_refcounts(real_app: Any, daemon_proc: Any) -> None:
    daemon_proc.post(turn_end("s1", ["sys", "a"]))
    daemon_proc.post(turn_end("s2", ["sys", "b"]))
    app = real_app()
    seen: list[Any] = []
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        table = app.screen.query_one(SessionTable)
        await until(pilot, lambda: table.row_count == 2, what="two rows")
        assert app.state.totals == {"sessions": 2, "chunks": 3, "references": 4}
        assert table.get_row("s2")[4].plain == "1"  # sys is shared with s1
        table.move_cursor(row=table.get_row_index("s1"))
        await pilot.press("s")
        await until(pilot, lambda: str(table.get_row("s1")[1]) == "suspended", what="s1 suspended")
        assert any(
            isinstance(m, Sessions.Act)
            and m.event_type == "session_suspend"
            and m.session_id == "s1"
            for m in seen
        )
        assert app.state.totals == {"sessions": 2, "chunks": 2, "references": 2}
        await pilot.press("r")  # restore
        await until(pilot, lambda: str(table.get_row("s1")[1]) == "active", what="restored")
        await until(pilot, lambda: app.state.references() == 4)


async def test_chunk_evict_dry_run_then_confirm(real_app: Any, daemon_proc: Any) -> None:
    daemon_proc.post(turn_end("s1", ["keep", "drop"]))
    app = real_app()
    seen: list[Any] = []
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await until(pilot, lambda: app.state.chunk_total() == 2)
        await pilot.press("2")
        table = app.screen.query_one(RefcountTable)
        await until(pilot, lambda: table.row_count == 2, what="the page from chunk_top")
        table.move_cursor(row=table.get_row_index("drop"))
        await pilot.press("space")
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), what="dry-run dialog")
        body = str(app.screen.query_one("#dialog-body Static").render())
        assert "Refused" in body and "drop" in body and "s1" in body
        dry = [
            m
            for m in seen
            if isinstance(m, Daemon.EventAnswered) and m.event["type"] == "chunk_evict"
        ]
        assert dry and dry[0].event["dry_run"] is True
        assert app.state.chunk_total() == 2  # a dry run changes nothing
        await pilot.click("#force")
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, ConfirmDialog)
                and "FORCE" in str(app.screen.query_one("#dialog-title").render())
            ),
            what="second confirmation",
        )
        await pilot.click("#force")
        await until(pilot, lambda: any(isinstance(m, Chunks.Evicted) for m in seen))
        done = next(m for m in seen if isinstance(m, Chunks.Evicted))
        assert done.force and done.envelope["ok"], done.envelope
        assert done.envelope["data"]["evicted"] == ["drop"]
        await until(
            pilot,
            lambda: "drop" not in table.rows and "keep" in table.rows,
            what="drop gone from the page",
        )
        await until(pilot, lambda: app.state.chunk_total() == 1, what="totals from the trace")


async def test_banner_when_the_daemon_goes_away_and_resume(real_app: Any, daemon_proc: Any) -> None:
    daemon_proc.post(turn_end("s1", ["x"]))
    app = real_app()
    async with app.run_test(size=SIZE) as pilot:
        banner = app.screen.query_one(ConnectionBanner)
        await until(pilot, lambda: app.connection[0] and "s1" in app.state.sessions)
        assert not banner.display
        daemon_proc.kill()
        await until(pilot, lambda: not app.connection[0], what="drop noticed")
        assert banner.display and "unreachable" in str(banner.render())
        port = daemon_proc.port
        daemon_proc.start()
        assert daemon_proc.port == port
        daemon_proc.post(turn_end("s2", ["y"]))
        # the restarted daemon numbers events from 0 again: the console takes a fresh snapshot
        await until(
            pilot,
            lambda: app.connection[0] and "s2" in app.state.sessions,
            what="reconnect",
        )
        assert not banner.display and "s1" in app.state.sessions


async def test_config_editor_round_trip(real_app: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "daemon.toml"
    cfg.write_text(
        '# hand-written comment\nlmcache_url = "http://lmcache:6999"\ncustom_flag = true\n'
    )
    app = real_app(daemon_config=cfg)
    seen: list[Any] = []
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await pilot.press("5")
        await until(pilot, lambda: bool(app.screen.query("#daemon-in-lmcache_url")), what="editor")
        url = app.screen.query_one("#daemon-in-lmcache_url", Input)
        await until(pilot, lambda: url.value == "http://lmcache:6999", what="the file's value")
        url.value = "not a url"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: "http://" in shown(app, "#daemon-err-lmcache_url"), what="error")
        assert not isinstance(app.screen, ConfirmDialog)
        url.value = "http://lmcache:7000"
        app.screen.query_one("#daemon-in-debug_enabled", Switch).value = True
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), what="diff dialog")
        body = str(app.screen.query_one("#dialog-body Static").render())
        assert "lmcache_url" in body and "debug_enabled" in body and "restart" in body
        await pilot.click("#write")
        await until(pilot, lambda: any(isinstance(m, Config.Saved) for m in seen))
    text = cfg.read_text()
    assert 'lmcache_url = "http://lmcache:7000"' in text and "debug_enabled = true" in text
    assert "custom_flag = true" in text  # unknown key kept
    assert "hand-written comment" not in text  # tomli-w drops comments (documented)
    assert "hand-written comment" in (tmp_path / "daemon.toml.bak").read_text()


async def test_fork_end_by_id_from_the_form_after_the_parents_close(
    real_app: Any, daemon_proc: Any
) -> None:
    daemon_proc.post(turn_end("p", ["sys", "a"]))
    ids = [daemon_proc.event("session_fork", session_id="p")["data"]["fork_id"] for _ in "12"]
    daemon_proc.event("session_close", session_id="p")  # its two forks stay open
    app = real_app()
    seen: list[Any] = []
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await until(
            pilot,
            lambda: "session_fork_end" in app.catalogue and len(app.state.forks) == 2,
            what="list_events and both open forks",
        )
        # The nine contract events and the admin ones both reach the form.
        assert "list_sessions" in app.admin_events and "session_fork" not in app.admin_events
        assert app.state.fork_ages("p").startswith(f"#{ids[0]} ")
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, FireEventScreen))
        await app.screen.choose("session_fork_end")
        form = app.screen.query_one(EventForm)
        await until(pilot, lambda: form.event_type == "session_fork_end", what="fork_end form")
        form.query_one("#field-session_id", Input).value = "p"
        form.query_one("#field-fork_id", Input).value = str(ids[0])
        # A reconnect reloads the same catalogue (one can land while the form is filled
        # in): the select and what was typed stay as they are.
        app.ctx.catalogue_loaded.publish(app.ctx.catalogue)
        await pilot.pause()
        assert form.event_type == "session_fork_end"
        assert form.query_one("#field-fork_id", Input).value == str(ids[0])
        await pilot.press("ctrl+s")
        await until(
            pilot,
            lambda: any(
                isinstance(m, Daemon.EventAnswered) and m.event["type"] == "session_fork_end"
                for m in seen
            ),
        )
        answered = next(
            m
            for m in seen
            if isinstance(m, Daemon.EventAnswered) and m.event["type"] == "session_fork_end"
        )
        assert answered.event == {"type": "session_fork_end", "session_id": "p", "fork_id": ids[0]}
        assert answered.envelope["data"] == {"fork_end": True, "fork_id": ids[0]}
        await until(pilot, lambda: list(app.state.forks) == [ids[1]], what="fork 1 gone")
