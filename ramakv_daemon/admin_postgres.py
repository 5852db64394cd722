"""ramakv-admin on a PostgreSQL store: the report over every node's rows, by owner."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import TextIO

from ramakv_daemon.config import Config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


async def _load(url: str) -> tuple[list, list, Counter, Counter]:
    """Every node's sessions and forks, the outbox by (namespace, mode), sessions by owner."""
    from ramakv_daemon.adapters.postgres_store import PostgresSessionStore

    store = PostgresSessionStore(url, node_id="ramakv-admin", pool_size=1)
    await store.open()
    try:
        return await store.admin_view()
    finally:
        await store.close()


def run(command: str, cfg: Config, url: str, as_json: bool, out: TextIO) -> int:
    """``report`` on PostgreSQL; clean-ups go through the owning daemons' events."""
    from ramakv_daemon.admin_cli import print_report, report
    from ramakv_daemon.ports import StoreError

    if command != "report":
        print(f"ramakv-admin: {command} is not available on a PostgreSQL store: send "
              "session_close to the daemon that owns each session (list_sessions shows "
              "the owner)", file=out)
        return EXIT_USAGE
    try:
        sessions, forks, outbox, owners = asyncio.run(_load(url))
    except StoreError as err:
        print(f"ramakv-admin: {err}", file=out)
        return EXIT_FAILED
    rep = report(sessions, outbox, cfg, time.time(), forks)
    rep["owners"] = dict(sorted(owners.items()))
    shown = cfg.with_overrides(session_store_url=url).store_shown
    if as_json:
        json.dump({"store": shown, **rep}, out, indent=2, sort_keys=True)
        print(file=out)
    else:
        print(f"store: {shown}", file=out)
        print("sessions by owner node: " + (", ".join(
            f"{node} {n}" for node, n in rep["owners"].items()) or "none"), file=out)
        print_report(rep, out)
    return EXIT_OK
