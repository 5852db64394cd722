"""Daemon tests: in-process app via aiohttp's test client, plus the real-process fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

# site-packages holds an unrelated top-level `tests` package, so shared helpers are
# imported as `support.*` with tests/ on sys.path (same convention as tests/fakes).
TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from support.daemon_app import daemon, make_config, rec_daemon, start_daemon  # noqa: E402,F401
from support.daemon_proc import daemon_proc, daemon_proc_factory  # noqa: E402,F401
