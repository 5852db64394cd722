"""Without ascend_ext's fix, lmcache 0.5.6's async loading double-frees on repeated hits.

The engine here runs with every patch but ``async_loading_double_release_fix``
(RAMAKV_ASCEND_EXT_SKIP), so this shows the bug the fix exists for, on the real engine: the
same repeats that test_engine_stack.py::test_repeated_ddr_hits_do_not_crash survives kill
it. If a future lmcache fixes the bug, this test fails: drop the version from
ascend_ext.lmcache_fixes.DOUBLE_RELEASE_VERSIONS.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from support.engine_rig import HTTP_TIMEOUT_S, start_engine, text

from ascend_ext.lmcache_fixes import DOUBLE_RELEASE_VERSIONS, lmcache_version

# Engine start-up (20-90 s, more on a loaded machine) counts into the first test.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1200)]

BUG_SIGNS = ("Double free", "invalidated MemoryObj", "EngineDeadError")


@pytest.fixture(scope="module")
def unfixed_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    if lmcache_version() not in DOUBLE_RELEASE_VERSIONS:
        pytest.skip(f"lmcache {lmcache_version()} is not known to have the double release")
    e = start_engine(
        tmp_path_factory.mktemp("unfixed"), skip_patches="async_loading_double_release_fix"
    )
    try:
        yield e
    finally:
        e.stop()


def test_repeated_hits_double_free_without_the_fix(unfixed_engine) -> None:
    body = {
        "model": "tiny",
        "prompt": text("repeated hits", 800),
        "max_tokens": 2,
        "temperature": 0,
    }
    statuses = []
    for _ in range(8):  # the 2nd or 3rd hit already fails; stop at the first sign
        try:
            r = httpx.post(
                unfixed_engine.url + "/v1/completions", json=body, timeout=HTTP_TIMEOUT_S
            )
            statuses.append(r.status_code)
        except httpx.HTTPError as err:
            statuses.append(type(err).__name__)
        if any(sign in unfixed_engine.log_text() for sign in BUG_SIGNS):
            break
    log = unfixed_engine.log_text()
    assert "async_loading_double_release_fix left out" in log
    assert any(sign in log for sign in BUG_SIGNS), (statuses, log[-4000:])
