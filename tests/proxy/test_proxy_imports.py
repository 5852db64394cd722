"""ramakv_proxy loads no textual/console/daemon/engine code; ramakv_sdk.proxy forwards to it.

The old name forwards with a DeprecationWarning."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ramakv_proxy


def test_proxy_imports_neither_textual_nor_the_daemon() -> None:
    code = (
        "import importlib, pkgutil, sys, ramakv_proxy\n"
        "for m in pkgutil.walk_packages(ramakv_proxy.__path__, 'ramakv_proxy.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('textual', 'ramakv_daemon', 'ramakv_console', 'ascend_ext'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_old_name_forwards_with_a_warning() -> None:
    import ramakv_sdk.proxy as old

    with pytest.warns(DeprecationWarning, match="use ramakv_proxy.make_app"):
        assert old.make_app is ramakv_proxy.make_app
    with pytest.warns(DeprecationWarning, match="use ramakv_proxy.RequestEnd"):
        assert old.Outcome is ramakv_proxy.RequestEnd
    with pytest.warns(DeprecationWarning), pytest.raises(AttributeError):
        _ = old.no_such_name


def test_the_old_module_still_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ramakv_sdk.proxy", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.startswith("ramakv-proxy ")
    assert "python -m ramakv_sdk.proxy is deprecated" in out.stderr
