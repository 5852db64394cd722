"""Scale-out tests: real daemon processes on one real PostgreSQL database."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS_DIR = str(Path(__file__).resolve().parents[1])
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from support.daemon_proc import daemon_proc_factory  # noqa: E402,F401
from support.postgres import postgres_server  # noqa: E402,F401
