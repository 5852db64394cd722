"""The running ConsoleApp, typed, for its screens and widgets (Textual types it App[Any])."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.dom import DOMNode

if TYPE_CHECKING:  # app.py imports the screens and widgets that import this module
    from ramakv_console.app import ConsoleApp


def console_app(node: DOMNode) -> ConsoleApp:
    """``node.app``: every screen and widget of this package runs inside a ConsoleApp."""
    return cast("ConsoleApp", node.app)
