"""Fixtures every suite shares, registered once here (the families are in tests/README.md).

``tests/`` is on ``sys.path`` through pyproject's ``[tool.pytest.ini_options] pythonpath``, so
helpers are imported as ``support.*`` (site-packages holds an unrelated top-level ``tests``
package, which is why the helpers are not ``tests.support``). No test file edits ``sys.path``.

- In-process daemon (support.daemon_app): ``make_config(**overrides)``,
  ``start_daemon(config=None, *, store=None, backend=None, clock=None, **overrides)``,
  ``daemon``, ``rec_daemon`` -> :class:`support.daemon_app.DaemonClient`.
- Real daemon process (support.daemon_proc): ``daemon_proc_factory(*, start=True, **kwargs)``
  (kwargs as :class:`support.daemon_proc.DaemonProcess`), ``daemon_proc``.
- Stand-in LMCache memory APIs on the test's loop (support.lmcache_fakes): ``fake_lmcache``,
  ``two_fakes``.
- A throw-away PostgreSQL server for the session (support.postgres): ``postgres_server``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# lmcache phones home on import unless told not to; tests never talk to the internet.
os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")

# Hypothesis fails an example that runs past its deadline (200 ms by default): a wall-clock
# bound that a loaded 2-core CI box, a first import or a first JIT can break. No property
# test here is about speed (bench/ is), so no example has a deadline.
settings.register_profile("ramakv", deadline=None)
settings.load_profile("ramakv")

# Plain asserts in the helpers report their operands like a test's own asserts do.
pytest.register_assert_rewrite("support")

pytest_plugins = [
    "support.daemon_app",
    "support.daemon_proc",
    "support.lmcache_fakes",
    "support.postgres",
]


@pytest.fixture(autouse=True)
def _own_state_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test's processes keep state (the proxy's pending suspends and closes) in a folder
    of their own: a proxy keeps ``pending-<port>.json`` under ``$XDG_STATE_HOME``, ports are
    reused across tests, and an earlier test's sessions of the same name were restored and
    closed as idle in a later one (CI: ``proxy_closes_idle`` 4 instead of 0)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
