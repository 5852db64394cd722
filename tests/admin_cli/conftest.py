"""Admin CLI tests: tests/ on sys.path (support.*, fakes.*); two stand-in LMCache servers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

from support.daemon_proc import daemon_proc, daemon_proc_factory  # noqa: E402,F401
from support.lmcache_fakes import two_fakes  # noqa: E402,F401
