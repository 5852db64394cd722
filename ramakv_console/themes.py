"""Load console themes from themes/*.toml; a broken file is skipped and reported."""

from __future__ import annotations

import site
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from textual.theme import Theme

COLOR_KEYS = (
    "primary",
    "secondary",
    "accent",
    "background",
    "surface",
    "panel",
    "success",
    "warning",
    "error",
    "foreground",
    "boost",
)
DEFAULT_THEME = "ramakv-dusk"


@dataclass(frozen=True, slots=True)
class ThemeProblem:
    """A theme file that could not be used, and why."""

    path: Path
    reason: str


def theme_dirs() -> list[Path]:
    """Where themes live: the repo's themes/ (source checkout or editable install),
    then the wheel's data files: <prefix>/share/ram-a-kv/themes (or the --user base)."""
    here = Path(__file__).resolve().parent
    share = Path("share") / "ram-a-kv" / "themes"
    return [here.parent / "themes", Path(sys.prefix) / share, Path(site.getuserbase()) / share]


def parse_theme(path: Path) -> Theme:
    """One theme file -> a Textual Theme; ValueError with a reason when unusable."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"unreadable: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"not valid TOML: {err}") from err
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("missing 'name'")
    if not isinstance(data.get("primary"), str):
        raise ValueError("missing 'primary' colour")
    colours = {k: data[k] for k in COLOR_KEYS if k in data}
    for key, value in colours.items():
        if not isinstance(value, str):
            raise ValueError(f"'{key}' must be a colour string")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ValueError("'dark' must be true or false")
    theme = Theme(name=name, dark=dark, **colours)
    try:
        theme.to_color_system()  # parses every colour now, not at first paint
    except Exception as err:  # Textual raises several colour error types
        raise ValueError(f"bad colour: {err}") from err
    return theme


def load_themes(dirs: list[Path] | None = None) -> tuple[list[Theme], list[ThemeProblem]]:
    """Every usable theme from the first existing directory, plus the problems found."""
    themes: list[Theme] = []
    problems: list[ThemeProblem] = []
    for d in dirs if dirs is not None else theme_dirs():
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.toml")):
            try:
                themes.append(parse_theme(path))
            except ValueError as err:
                problems.append(ThemeProblem(path, str(err)))
        break
    return themes, problems
