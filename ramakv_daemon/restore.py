"""Start-up: every stored session, fork, outbox row and event_id answer back in memory."""

from __future__ import annotations

import json
import logging
import time

from ramakv_daemon.commit.committer import GroupCommitter
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.session import Session
from ramakv_daemon.pipeline.idempotency import AnswerCache
from ramakv_daemon.ports import SessionStore
from ramakv_daemon.routing.namespaces import Namespaces

log = logging.getLogger("ramakv")


async def restore(
    store: SessionStore,
    namespaces: Namespaces,
    committer: GroupCommitter,
    answers: AnswerCache,
    answer_window: int,
    store_shown: str,
    t0: float,
    now: float = 0.0,
) -> None:
    """Load the open store into the namespaces (a namespace found only in the database is
    added), the outbox into their dispatchers and the answers into ``answers``; ``t0``:
    ``time.perf_counter()`` when start-up began (logged); ``now``: the wall-clock time
    the retention window counts the loaded sessions' shared chunks from."""
    groups: dict[str, list[Session]] = {key: [] for key in namespaces.managers}
    for s in await store.load_all():
        groups.setdefault(s.namespace, []).append(s)
    forks, next_fork_id = await store.load_forks()
    fork_groups: dict[str, list[Fork]] = {}
    for f in forks:
        fork_groups.setdefault(f.namespace, []).append(f)
        groups.setdefault(f.namespace, [])
    namespaces.fork_ids.seen(next_fork_id - 1)
    for key, group in groups.items():
        namespaces.add(key).manager.load(group, fork_groups.get(key, ()), now)
    for row_id, key, entries in await store.load_outbox():
        committer.next_row_id = max(committer.next_row_id, row_id + 1)
        namespaces.add(key).dispatcher.load(row_id, entries)
    for event_id, body, *digest in await store.load_event_ids(answer_window):
        answers.remember(event_id, json.loads(body), digest[0] if digest else "")
    managers = namespaces.managers.values()
    log.info(
        "ram-a-kv restored %d sessions, %d open forks, %d chunks, %d references in %d "
        "namespaces in %.3fs from %s",
        sum(len(m.sessions) for m in managers),
        sum(len(m.forks) for m in managers),
        sum(len(m.refcounts) for m in managers),
        sum(m.refcounts.total_references() for m in managers),
        len(managers),
        time.perf_counter() - t0,
        store_shown,
    )
