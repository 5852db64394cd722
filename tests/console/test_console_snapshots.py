"""SVG snapshots of the main views with fixed data and a fixed clock (no daemon)."""

from __future__ import annotations

from typing import Any

from conftest import until

SIZE = (120, 32)


async def _loaded(pilot: Any) -> None:
    await until(pilot, lambda: len(pilot.app.state.sessions) == 3, what="fixed snapshot")
    await pilot.pause(0.2)


def test_sessions_view(snap_compare: Any, fake_app: Any) -> None:
    assert snap_compare(fake_app(), terminal_size=SIZE, run_before=_loaded)


def test_session_detail_view(snap_compare: Any, fake_app: Any) -> None:
    async def open_alpha(pilot: Any) -> None:
        await _loaded(pilot)
        await pilot.press("enter")
        await pilot.pause(0.3)

    assert snap_compare(fake_app(), terminal_size=SIZE, run_before=open_alpha)


def test_fire_event_form(snap_compare: Any, fake_app: Any) -> None:
    async def open_form(pilot: Any) -> None:
        await _loaded(pilot)
        await pilot.press("4")
        await until(pilot, lambda: "turn_end" in pilot.app.catalogue)
        await pilot.pause(0.4)

    assert snap_compare(fake_app(), terminal_size=SIZE, run_before=open_form)


async def test_broken_theme_falls_back_with_a_notice(fake_app: Any, tmp_path: Any) -> None:
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "#zzzzzz"\n')
    (themes / "fine.toml").write_text('name = "fine"\nprimary = "#336699"\ndark = false\n')
    app = fake_app(theme="broken", theme_dirs=[themes])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        notes = [n.message for n in app._notifications]
        assert any("broken.toml" in m for m in notes), notes
        assert app.theme == "textual-dark"  # the default ramakv-dusk is not in this folder
        assert "fine" in app.available_themes
