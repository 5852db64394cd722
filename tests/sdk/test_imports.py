"""The SDK stays light: no textual, no daemon code, once every module is imported."""

from __future__ import annotations

import subprocess
import sys

MODULES = (
    "ramakv_sdk",
    "ramakv_sdk.client",
    "ramakv_sdk.trace",
    "ramakv_sdk.config",
    "ramakv_sdk.global_client",
    "ramakv_sdk.sender",
    "ramakv_sdk.payloads",
    "ramakv_sdk.results",
    "ramakv_sdk.errors",
    "ramakv_sdk.cli",
    "ramakv_sdk.lifecycle.machine",
    "ramakv_sdk.lifecycle.clock",
    "ramakv_sdk.lifecycle.landing",
    "ramakv_sdk.proxy",  # the deprecated name: importing it loads nothing of ramakv_proxy
    "ramakv_sdk.hooks",
)


def test_sdk_imports_neither_textual_nor_the_daemon() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {MODULES!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('textual', 'ramakv_daemon', 'ramakv_console', 'ascend_ext', 'ramakv_proxy'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
