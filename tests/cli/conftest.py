"""Fixtures for the CLI suite: runners for ``ramakv`` in-process and as the installed script."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ramakv_sdk.cli import main

RAMAKV = str(Path(sys.executable).with_name("ramakv"))


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def ramakv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Result]:
    """Run ``ramakv`` in-process (``cli.main``) with an empty XDG config home."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))

    def run(*args: str, stdin: str | None = None) -> Result:
        capsys.readouterr()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin or ""))
        try:
            code = main(list(args))
        except SystemExit as err:  # argparse
            code = int(err.code or 0)
        out, err_text = capsys.readouterr()
        return Result(code, out, err_text)

    return run


@pytest.fixture
def ramakv_script(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the installed ``ramakv`` console script with an empty XDG config home."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RAMAKV, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60
        )

    return run
