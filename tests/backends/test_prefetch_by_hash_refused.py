"""A cache that prefetches by token ids only (the stock LMCache server answers a hash
prefetch 501) gets one hash prefetch, not one failed call per restore: the daemon stops
sending them, says so once, and counts no backend error for them."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from support.daemon_app import RecordingBackend

from ramakv_daemon.adapters.sqlite.store import SqliteSessionStore
from ramakv_daemon.bootstrap import build
from ramakv_daemon.config import Config
from ramakv_daemon.ports import BackendResult

HASHES = ["a1", "a2", "a3"]


class TokenPrefetchOnly(RecordingBackend):
    """Prefetches as the stock server's adapter does: by token ids, a hash prefetch 501."""

    async def prefetch(self, chunk_hashes: Sequence[str], tag: str) -> BackendResult:
        self.calls.append(("prefetch", list(chunk_hashes)))
        return BackendResult(False, 501, "prefetches by token ids, not by chunk hash")


@pytest.fixture
async def daemon(tmp_path):
    db = str(tmp_path / "s.db")
    svc = build(Config(session_store_path=db), SqliteSessionStore(db), TokenPrefetchOnly())
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


async def _event(svc, **body):
    status, answer = await svc.handle(body)
    assert status == 200 and answer["ok"], answer
    await svc.default.dispatcher.drain()
    return answer["data"]


async def _suspend_restore(svc, sid: str) -> None:
    await _event(svc, type="turn_end", session_id=sid, kv_transfer_params={"chunk_hashes": HASHES})
    await _event(svc, type="session_suspend", session_id=sid)
    await _event(svc, type="snapshot_restore", session_id=sid)


async def test_a_refused_hash_prefetch_is_not_sent_again_nor_counted_as_an_error(daemon, caplog):
    caplog.set_level("INFO", logger="ramakv.backend")
    await _suspend_restore(daemon, "s1")
    await _suspend_restore(daemon, "s2")
    backend = daemon.backend
    assert [c for c in backend.calls if c[0] == "prefetch"] == [("prefetch", HASHES)]
    metrics = daemon.metrics.render().decode()
    assert not re.search(r'ramakv_backend_errors_total\{op="prefetch"\} [1-9]', metrics)
    said = [
        r.getMessage() for r in caplog.records if "prefetches no chunk hashes" in r.getMessage()
    ]
    assert len(said) == 1
