"""Fixtures: an in-process daemon (tmp SQLite, noop backend) and a real daemon process."""

from __future__ import annotations

import sys
from pathlib import Path

# site-packages holds an unrelated top-level `tests` package: import helpers as `support.*`.
TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from support.daemon_proc import daemon_proc, daemon_proc_factory  # noqa: E402,F401
from support.lmcache_fakes import fake_lmcache  # noqa: E402,F401
from support.opsurface import daemon, make_config, start_daemon  # noqa: E402,F401
