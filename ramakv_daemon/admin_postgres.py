"""ramakv-admin on a PostgreSQL store: report, clean-ups by handing sessions back, vacuum."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, TextIO

from ramakv_daemon.config import Config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
ADMIN_NODE = "ramakv-admin"  # the node id the tool writes as (never owns a row)


async def _with_store(url: str, act: Any) -> Any:
    """Run ``act(store)`` on an opened store (one connection), closed afterwards."""
    from ramakv_daemon.adapters.postgres_store import PostgresSessionStore

    store = PostgresSessionStore(url, node_id=ADMIN_NODE, pool_size=1)
    await store.open()
    try:
        return await act(store)
    finally:
        await store.close()


def run(args: argparse.Namespace, cfg: Config, url: str, out: TextIO) -> int:
    """One command on the shared database; StoreError: exit 1, saying why."""
    from ramakv_daemon.ports import StoreError

    shown = cfg.with_overrides(session_store_url=url).store_shown
    try:
        if args.command == "report":
            return _report(cfg, url, shown, bool(args.json), out)
        print(f"store: {shown}", file=out)
        if args.command == "vacuum":
            return _vacuum(url, bool(args.yes), out)
        return _cleanup(args, cfg, url, shown, out)
    except StoreError as err:
        print(f"ramakv-admin: {err}", file=out)
        return EXIT_FAILED


def _report(cfg: Config, url: str, shown: str, as_json: bool, out: TextIO) -> int:
    from ramakv_daemon.admin_cli import print_report, report

    sessions, forks, outbox, owners = asyncio.run(_with_store(url, lambda s: s.admin_view()))
    rep = report(sessions, outbox, cfg, time.time(), forks)
    rep["owners"] = dict(sorted(owners.items()))
    if as_json:
        json.dump({"store": shown, **rep}, out, indent=2, sort_keys=True)
        print(file=out)
    else:
        print(f"store: {shown}", file=out)
        print(
            "sessions by owner node: "
            + (", ".join(f"{node} {n}" for node, n in rep["owners"].items()) or "none"),
            file=out,
        )
        print_report(rep, out)
    return EXIT_OK


def _vacuum(url: str, yes: bool, out: TextIO) -> int:
    print(
        "VACUUM (ANALYZE) the store's tables (plain VACUUM: running daemons go on "
        "reading and writing)",
        file=out,
    )
    if not yes:
        print("dry run: nothing changed (add --yes to act)", file=out)
        return EXIT_OK
    asyncio.run(_with_store(url, lambda s: s.vacuum()))
    print("done: vacuumed", file=out)
    return EXIT_OK


def _cleanup(args: argparse.Namespace, cfg: Config, url: str, shown: str, out: TextIO) -> int:
    """close-idle / purge-namespace: each listed session's row is deleted only if no event
    reached it since this plan, and its owner node is told at that commit (as on a
    handover), so the owner releases it as a session_close would; nothing is evicted here
    (the chunks are in the owner's LMCache, which only the owner's daemon reaches)."""
    from ramakv_daemon.admin_cli import plan_for

    async def load(store: Any) -> tuple[Any, dict[int, str]]:
        return await store.admin_view(), await store.fork_owners()

    (sessions, forks, _outbox, _owners), fork_owner = asyncio.run(_with_store(url, load))
    now = time.time()
    plan = plan_for(args, cfg, sessions, forks, now, shown)
    if plan is None:
        return EXIT_USAGE
    plan.describe(out, now)
    held = [f for f in plan.forks if f.fork_id in fork_owner]
    for f in held:  # a fork's references live in its node's memory: only it can end one
        print(
            f"fork {f.fork_id} of {f.session_id} is held by node "
            f"{fork_owner[f.fork_id]}: send it session_fork_end (not ended here)",
            file=out,
        )
    if not args.yes:
        print(
            "dry run: nothing changed (add --yes to act); with --yes each session's "
            "owner node is told to release it",
            file=out,
        )
        return EXIT_OK

    async def close_all(store: Any) -> list[tuple[str, str | None]]:
        return [
            (s.session_id, await store.admin_close(s.session_id, s.last_event_ts))
            for s in plan.sessions
        ]

    closed = asyncio.run(_with_store(url, close_all))
    moved = [sid for sid, owner in closed if owner is None]
    for sid in moved:
        print(
            f"session {sid}: an event reached it since the plan (or it is gone): left as it is",
            file=sys.stderr,
        )
    by_node: dict[str, int] = {}
    for _sid, owner in closed:
        if owner is not None:
            by_node[owner] = by_node.get(owner, 0) + 1
    print(
        f"closed {len(closed) - len(moved)} sessions; owner nodes told to release them: "
        + (", ".join(f"{n} {c}" for n, c in sorted(by_node.items())) or "none"),
        file=out,
    )
    return EXIT_FAILED if held else EXIT_OK
