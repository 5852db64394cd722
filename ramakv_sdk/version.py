"""The installed ram-a-kv version, and the ``--version`` flag every console script has."""

from __future__ import annotations

import argparse
from importlib import metadata

DISTRIBUTION = "ram-a-kv"


def package_version() -> str:
    """The installed distribution's version ("unknown" when run from an uninstalled tree)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """``--version``: print ``<prog> <version>`` and exit 0."""
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
