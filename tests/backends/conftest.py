"""Backend tests: make tests/fakes importable however pytest is launched; fake server fixture."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# site-packages already holds an unrelated top-level `tests` package (shipped by a lmcache
# dependency), so the fakes are imported as `fakes.*` with tests/ on sys.path.
TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

from support.lmcache_fakes import fake_lmcache  # noqa: E402,F401
