"""The console fixes of the scale round: fire form, focus and view keys, token and 401,
Escape, readable notices, ticking ages, the 80-column footer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.console_rig import FIXED_NOW, FakeLink, until
from textual.widgets import Input, Select

from ramakv_console.app import ConsoleApp
from ramakv_console.screens.fire_event import FireEventScreen
from ramakv_console.screens.refcounts import RefcountsScreen
from ramakv_console.screens.sessions import SessionsScreen
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.event_form import EventForm
from ramakv_console.widgets.key_bar import KeyBar
from ramakv_console.widgets.session_table import SessionTable

SIZE = (120, 32)


async def loaded(pilot: Any) -> SessionTable:
    table = pilot.app.screen.query_one(SessionTable)
    await until(
        pilot,
        lambda: table.row_count == 3 and "turn_end" in pilot.app.catalogue,
        what="rows and list_events",
    )
    return table


async def test_e_opens_the_fire_form_with_the_session(fake_app: Any) -> None:
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        table = await loaded(pilot)
        table.move_cursor(row=table.get_row_index("agent-beta"))
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, FireEventScreen), what="fire form")
        form = app.screen.query_one(EventForm)
        await until(
            pilot,
            lambda: (
                form.event_type == "turn_end"
                and form.query("#field-session_id")
                and form.query_one("#field-session_id", Input).value == "agent-beta"
            ),
            what="session id prefilled",
        )


async def test_picking_an_event_then_typing_fills_the_form(fake_app: Any) -> None:
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("4")
        await until(pilot, lambda: isinstance(app.screen, FireEventScreen))
        select = app.screen.query_one("#event-type", Select)
        select.focus()
        await pilot.press("enter")  # Enter opens the Select
        await until(pilot, lambda: select.expanded, what="the Select open")
        await pilot.press("escape")
        await until(pilot, lambda: not select.expanded)
        await pilot.press("space")  # and Space does too
        await until(pilot, lambda: select.expanded, what="the Select open by space")
        await pilot.press("escape")
        select.value = "session_suspend"
        form = app.screen.query_one(EventForm)
        await until(
            pilot,
            lambda: form.event_type == "session_suspend" and isinstance(app.focused, Input),
            what="focus in the first field",
        )
        await pilot.press("1", "2", "x")  # digits typed into a field never switch views
        assert isinstance(app.screen, FireEventScreen)
        assert form.query_one("#field-session_id", Input).value == "12x"
        await pilot.press("escape", "1")  # out of the field: the view keys work again
        await until(pilot, lambda: isinstance(app.screen, SessionsScreen))
        box = app.screen.query_one("#session-filter", Input)
        assert box.value == "" and not box.has_focus  # nothing leaked into the filter


async def test_escape_clears_the_session_filter(fake_app: Any) -> None:
    app = fake_app()
    async with app.run_test(size=SIZE) as pilot:
        table = await loaded(pilot)
        await pilot.press("slash", "b", "e", "t")
        await until(pilot, lambda: table.row_count == 1, what="filtered")
        await pilot.press("escape")
        await until(pilot, lambda: table.row_count == 3, what="filter cleared")
        assert app.screen.query_one("#session-filter", Input).value == ""
        assert table.has_focus


async def test_session_action_notice_is_readable(fake_app: Any) -> None:
    class Answering(FakeLink):
        async def send(self, event: dict[str, Any]) -> dict[str, Any]:
            if event.get("type") == "session_fork":
                return {"ok": True, "type": "session_fork", "data": {"forked": True}}
            return await super().send(event)

    app = fake_app(link=Answering())
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("k")
        await until(
            pilot,
            lambda: any("session_fork" in n.message for n in app._notifications),
            what="the notice",
        )
        note = next(n.message for n in app._notifications if "session_fork" in n.message)
        assert note == "session_fork agent-alpha: forked=true"


async def test_ages_tick(fake_app: Any) -> None:
    now = [FIXED_NOW]
    app = ConsoleApp(
        FakeLink.url,
        FakeLink(),
        clock=lambda: now[0],
        daemon_config=Path("/nonexistent/d.toml"),
        sdk_config=Path("/nonexistent/s.toml"),
    )
    async with app.run_test(size=SIZE) as pilot:
        table = await loaded(pilot)
        assert table.get_row("agent-alpha")[6] == "12s"
        now[0] += 60
        await until(
            pilot,
            lambda: "72s" not in table.render_line(1).text and "1m" in table.render_line(1).text,
            what="the age to move on",
        )


async def test_footer_keeps_view_keys_and_help_at_80_columns(fake_app: Any) -> None:
    app = fake_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot)
        for key, screen in (("2", RefcountsScreen), ("1", SessionsScreen)):
            await pilot.press(key)
            await until(pilot, lambda s=screen: isinstance(app.screen, s))
            bar = app.screen.query_one(KeyBar)
            await until(pilot, lambda b=bar: "Help" in str(b.render()), what="the key bar")
            text = str(bar.render())
            for word in ("1", "Sessions", "2", "Refcounts", "3", "Trace", "? ", "Help"):
                assert word in text, (word, text)
        header = str(app.screen.query_one("#stats").render())
        assert "sessions 3" in header and "seq 42" in header


async def test_wrong_token_is_shown_as_such(
    real_app: Any, daemon_proc_factory: Any, tmp_path: Path
) -> None:
    d = daemon_proc_factory(config={"auth_token": "s3cret"})
    app = ConsoleApp(
        d.url, token="wrong", daemon_config=tmp_path / "d.toml", sdk_config=tmp_path / "s.toml"
    )
    async with app.run_test(size=SIZE) as pilot:
        banner = app.screen.query_one(ConnectionBanner)
        await until(pilot, lambda: app.connection_error == "unauthorized", what="401")
        text = str(banner.render())
        assert "refused the console's token" in text and "HTTP 401" in text
        assert "unreachable" not in text


async def test_sdk_config_token_is_used(daemon_proc_factory: Any, tmp_path: Path) -> None:
    d = daemon_proc_factory(config={"auth_token": "s3cret"})
    d.post({"type": "turn_end", "session_id": "t1", "kv_transfer_params": {"chunk_hashes": ["a"]}})
    sdk = tmp_path / "sdk.toml"
    sdk.write_text(f'daemon_url = "{d.url}"\nauth_token = "s3cret"\n')
    app = ConsoleApp(d.url, daemon_config=tmp_path / "d.toml", sdk_config=sdk)
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot,
            lambda: "t1" in app.state.sessions,
            what="the session over an authenticated trace",
        )
        assert app.connection[0]
