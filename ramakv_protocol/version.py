"""The installed ram-a-kv version, and the ``--version`` flag every console script has."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

DISTRIBUTION = "ram-a-kv"


@cache
def package_version() -> str:
    """The installed distribution's version ("unknown" when run from an uninstalled tree).

    Looked up once, on first use: importlib.metadata (with the zipfile, csv and email
    modules it imports) and the scan of sys.path for the distribution cost a daemon's
    start-up about as much as its own modules' imports."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse.Action):
    """argparse's ``version`` action, but the version is looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{parser.prog} {package_version()}\n")
        parser.exit()


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """``--version``: print ``<prog> <version>`` and exit 0."""
    parser.add_argument("--version", action=_VersionAction)
