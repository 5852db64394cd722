"""Console fixtures: ConsoleApp builders on a scripted fake link or on the real daemon process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.console_rig import FIXED_NOW, FakeLink


@pytest.fixture
def fake_app(tmp_path: Path) -> Callable[..., Any]:
    """Build a ConsoleApp on a FakeLink with a fixed clock and temp config paths."""
    from ramakv_console.app import ConsoleApp

    def make(**kwargs: Any) -> ConsoleApp:
        link = kwargs.pop("link", None) or FakeLink()
        kwargs.setdefault("daemon_config", tmp_path / "daemon.toml")
        kwargs.setdefault("sdk_config", tmp_path / "sdk.toml")
        return ConsoleApp(link.url, link, clock=lambda: FIXED_NOW, **kwargs)

    return make


@pytest.fixture
def real_app(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Build a ConsoleApp on the real daemon process (the ``daemon_proc`` fixture)."""
    from ramakv_console.app import ConsoleApp

    proc = request.getfixturevalue("daemon_proc")

    def make(**kwargs: Any) -> ConsoleApp:
        kwargs.setdefault("daemon_config", tmp_path / "daemon.toml")
        kwargs.setdefault("sdk_config", tmp_path / "sdk.toml")
        return ConsoleApp(proc.url, **kwargs)

    return make
