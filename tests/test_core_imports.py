"""ramakv_daemon.core stays pure: importing all of it pulls in no I/O or UI framework."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("aiohttp", "aiosqlite", "httpx", "textual", "asyncio", "sqlite3")

PROBE = f"""
import importlib, json, pkgutil, sys
import ramakv_daemon.core as core
names = [m.name for m in pkgutil.walk_packages(core.__path__, core.__name__ + ".")]
for name in names:
    importlib.import_module(name)
forbidden = {FORBIDDEN!r}
bad = sorted(m for m in sys.modules if m.split(".")[0] in forbidden)
daemon = sorted(
    m for m in sys.modules
    if m.startswith("ramakv_daemon.") and not m.startswith("ramakv_daemon.core")
)
print(json.dumps({{"modules": names, "bad": bad, "daemon": daemon}}))
"""


def test_core_imports_nothing_forbidden() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "ramakv_daemon.core.manager" in result["modules"]
    assert result["bad"] == [], f"core pulled in {result['bad']}"
    # core depends on nothing else in the daemon either (arrows point inward).
    assert result["daemon"] == [], f"core pulled in {result['daemon']}"
