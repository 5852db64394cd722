"""SVG snapshots of the main views with fixed data and a fixed clock (no daemon).

Each waits for the condition its picture depends on (rows loaded, the form built, the map
fetched), never for time: the session table's column widths follow from the data alone.
"""

from __future__ import annotations

from typing import Any

from support.console_rig import until

from ramakv_console.widgets.chunk_map_table import ChunkMapTable
from ramakv_console.widgets.event_form import EventForm
from ramakv_console.widgets.session_table import SessionTable

SIZE = (120, 32)


async def _settled(pilot: Any) -> None:
    """Nothing left to apply or draw."""
    app = pilot.app
    await until(
        pilot,
        lambda: not app._pending and "turn_end" in app.catalogue,
        what="trace applied and list_events answered",
    )
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


async def _loaded(pilot: Any) -> None:
    app = pilot.app
    await until(
        pilot,
        lambda: (
            len(app.state.sessions) == 3
            and not app.state.loading
            and app.screen.query_one(SessionTable).row_count == 3
        ),
        what="fixed snapshot",
    )
    await _settled(pilot)


def test_sessions_view(snap_compare: Any, fake_app: Any) -> None:
    assert snap_compare(fake_app(), terminal_size=SIZE, run_before=_loaded)


def test_session_detail_view(snap_compare: Any, fake_app: Any) -> None:
    async def open_alpha(pilot: Any) -> None:
        await _loaded(pilot)
        await pilot.press("enter")
        await until(
            pilot,
            lambda: (
                pilot.app.screen.query(ChunkMapTable)
                and pilot.app.screen.query_one(ChunkMapTable).row_count == 4
            ),
            what="agent-alpha's map",
        )
        await _settled(pilot)

    assert snap_compare(fake_app(), terminal_size=SIZE, run_before=open_alpha)


def test_fire_event_form(snap_compare: Any, fake_app: Any) -> None:
    async def open_form(pilot: Any) -> None:
        await _loaded(pilot)
        await pilot.press("4")
        await until(
            pilot,
            lambda: (
                pilot.app.screen.query(EventForm)
                and pilot.app.screen.query_one(EventForm).event_type == "turn_end"
            ),
            what="the turn_end form",
        )
        await _settled(pilot)

    assert snap_compare(fake_app(), terminal_size=SIZE, run_before=open_form)


async def test_broken_theme_falls_back_with_a_notice(fake_app: Any, tmp_path: Any) -> None:
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "#zzzzzz"\n')
    (themes / "fine.toml").write_text('name = "fine"\nprimary = "#336699"\ndark = false\n')
    app = fake_app(theme="broken", theme_dirs=[themes])
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot,
            lambda: any("broken.toml" in n.message for n in app._notifications),
            what="the theme notice",
        )
        notes = [n.message for n in app._notifications]
        assert any("broken.toml" in m for m in notes), notes
        assert app.theme == "textual-dark"  # the default ramakv-dusk is not in this folder
        assert "fine" in app.available_themes
