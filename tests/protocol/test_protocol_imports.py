"""ramakv_protocol is standard library only: importing every module of it pulls in nothing else."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import importlib, json, pkgutil, sys
before = set(sys.modules)
import ramakv_protocol
names = [m.name for m in pkgutil.walk_packages(ramakv_protocol.__path__, "ramakv_protocol.")]
for name in names:
    importlib.import_module(name)
new = sorted({m.split(".")[0] for m in set(sys.modules) - before})
outside = [m for m in new if m not in sys.stdlib_module_names and m != "ramakv_protocol"]
print(json.dumps({"modules": names, "outside": outside}))
"""


def test_protocol_imports_only_the_standard_library() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "ramakv_protocol.resume" in result["modules"]
    assert "ramakv_protocol.records" in result["modules"]
    assert result["outside"] == [], f"ramakv_protocol pulled in {result['outside']}"


def test_no_other_package_defines_the_close_codes() -> None:
    """4008 and 4010 are ramakv_protocol.wire's: the daemon, SDK and console import them."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    offenders = []
    for pkg in ("ramakv_daemon", "ramakv_sdk", "ramakv_console"):
        for path in (repo / pkg).rglob("*.py"):
            text = path.read_text()
            if "= 4008" in text or "= 4010" in text:
                offenders.append(str(path.relative_to(repo)))
    assert offenders == []
