"""``ramakv-admin``: reports and explicit clean-ups of a session store; never automatic."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

from ramakv_daemon import config as config_mod
from ramakv_daemon.admin_port import Cleanup, StoreAdmin
from ramakv_daemon.cli import admin_l2
from ramakv_daemon.cli.admin_daemon import apply_online, daemon_url, holding_problem
from ramakv_daemon.cli.admin_plan import describe, parse_duration, plan_for
from ramakv_daemon.cli.admin_report import print_report, report
from ramakv_daemon.config import Config, ConfigError
from ramakv_daemon.ports import StoreError, StoreInUse, StoreNotFound
from ramakv_protocol.version import add_version_flag

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_RUNNING = 0, 1, 2, 4


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(
        prog="ramakv-admin",
        description="Reports and explicit clean-ups of a ram-a-kv session store. Never runs "
        "by itself; clean-ups are dry runs unless --yes. Exit: 0 ok, 1 failed, 2 usage, "
        "4 refused because the daemon is running.",
    )
    p.add_argument(
        "--config", help="daemon config (else $RAM_A_KV_CONFIG, else /etc/ram-a-kv/config.toml)"
    )
    p.add_argument(
        "--db",
        help="SQLite file or postgresql:// URL (default: the config's "
        "session_store_url, else session_store_path)",
    )
    p.add_argument("--url", help="daemon URL (default: from listen_addr)")
    add_version_flag(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser("report", help="sessions, idle ages, chunks, budget use, outbox")
    r.add_argument("--json", action="store_true")
    c = sub.add_parser("close-idle", help="close sessions idle longer than --older-than")
    c.add_argument("--older-than", type=parse_duration, required=True, metavar="DURATION")
    c.add_argument("--namespace", help="only this namespace (name or kvp-...; '' = default)")
    c.add_argument("--state", choices=("active", "suspended"))
    c.add_argument("--yes", action="store_true", help="act (default: dry run)")
    g = sub.add_parser("purge-namespace", help="close every session of one namespace")
    g.add_argument("namespace", help="kvp-... (or a configured deployment's name)")
    g.add_argument("--yes", action="store_true", help="act (default: dry run)")
    v = sub.add_parser("vacuum", help="VACUUM the file (daemon must be stopped)")
    v.add_argument("--yes", action="store_true", help="act (default: dry run)")
    admin_l2.add_commands(sub)
    i = sub.add_parser("identity", help="print a deployment identity's namespace")
    i.add_argument("--from", dest="path", required=True)
    i.add_argument("--json", action="store_true")
    return p


def store_admin(cfg: Config, db: str | None) -> StoreAdmin:
    """The admin port on the store ``--db`` names, else the config's."""
    pg_url = (
        db
        if (db or "").startswith(config_mod.PG_SCHEMES)
        else (None if db else cfg.session_store_url or None)
    )
    if pg_url:
        from ramakv_daemon.adapters.postgres.admin import PostgresStoreAdmin

        return PostgresStoreAdmin(pg_url, cfg.with_overrides(session_store_url=pg_url).store_shown)
    from ramakv_daemon.adapters.sqlite.admin import SqliteStoreAdmin

    return SqliteStoreAdmin(db or cfg.session_store_path)


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run one command."""
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    if args.command == "identity":
        from ramakv_daemon.cli.identity import main as identity_main

        return identity_main(["--from", args.path] + (["--json"] if args.json else []), out)
    try:
        cfg, warnings = config_mod.load_for_cli(args.config)
    except ConfigError as err:
        print(f"ramakv-admin: {err}", file=sys.stderr)
        return EXIT_USAGE
    for w in warnings:
        if "not found" not in w:
            print(f"ramakv-admin: {w}", file=sys.stderr)
    contradiction = _contradiction(args, cfg)
    if contradiction:
        print(f"ramakv-admin: {contradiction}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return _in_own_loop(_run(args, cfg, store_admin(cfg, args.db), out))
    except StoreNotFound as err:
        print(f"ramakv-admin: {err}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as err:
        print(f"ramakv-admin: {err}", file=sys.stderr)
        return EXIT_FAILED


def _contradiction(args: argparse.Namespace, cfg: Config) -> str | None:
    """Why ``--db`` and ``--config`` name two different stores, or None: acting on one
    store while talking to the other's daemon would close the wrong sessions."""
    if not args.config or not args.db:
        return None
    theirs = cfg.session_store_url or cfg.session_store_path
    if args.db.startswith(config_mod.PG_SCHEMES) or theirs.startswith(config_mod.PG_SCHEMES):
        same = args.db == theirs
    else:
        same = os.path.realpath(args.db) == os.path.realpath(theirs)
    if same:
        return None
    shown = cfg.store_shown if cfg.session_store_url else theirs
    return (
        f"--db {args.db} contradicts --config {args.config}, whose store is {shown}: "
        "give one of them (--db alone, with --url for its daemon)"
    )


def _in_own_loop(command: Coroutine[object, object, int]) -> int:
    """Run ``command`` in a loop of its own: here, or on a thread when this thread already
    runs one (main() called from async code: an embedding program, a test)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(command)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ramakv-admin") as pool:
        return pool.submit(asyncio.run, command).result()


async def _run(args: argparse.Namespace, cfg: Config, admin: StoreAdmin, out: TextIO) -> int:
    await admin.open()
    try:
        if args.command == "report":
            return await _report(args, cfg, admin, out)
        if args.command in ("l2-report", "l2-cleanup"):
            return await admin_l2.run(args, cfg, await admin.read(), out)
        print(f"store: {admin.shown}", file=out)
        if args.command == "vacuum":
            return await _vacuum(args, cfg, admin, out)
        return await _cleanup(args, cfg, admin, out)
    finally:
        await admin.close()


async def _report(args: argparse.Namespace, cfg: Config, admin: StoreAdmin, out: TextIO) -> int:
    rep = report(await admin.read(), cfg, time.time())
    if args.json:
        json.dump({"store": admin.shown, **rep}, out, indent=2, sort_keys=True)
        print(file=out)
    else:
        print(f"store: {admin.shown}", file=out)
        print_report(rep, out)
    return EXIT_OK


async def _vacuum(args: argparse.Namespace, cfg: Config, admin: StoreAdmin, out: TextIO) -> int:
    print(admin.vacuum_plan(), file=out)
    if not args.yes:
        await _dry_run(admin, cfg, args, out, through_daemon=False)
        return EXIT_OK
    try:
        await admin.vacuum()
    except StoreInUse as busy:
        return _refused(busy, None)
    print("done: vacuumed" if admin.shared else f"done: {admin.shown} changed", file=out)
    return EXIT_OK


async def _cleanup(args: argparse.Namespace, cfg: Config, admin: StoreAdmin, out: TextIO) -> int:
    """close-idle / purge-namespace: the plan listed, then carried out with --yes: on the
    store (a daemon's file under its lock, or a shared store whose owners are told), else
    through the running daemon's events, else refused."""
    view = await admin.read()
    now = time.time()
    plan = plan_for(args, cfg, view.sessions, view.forks, now, admin.shown)
    if plan is None:
        return EXIT_USAGE
    describe(plan, out, now)
    for f in plan.forks:  # a fork's references live in its node's memory: only it can end one
        if f.fork_id in view.fork_holders:
            print(
                f"fork {f.fork_id} of {f.session_id} is held by node "
                f"{view.fork_holders[f.fork_id]}: send it session_fork_end (not ended here)",
                file=out,
            )
    if not args.yes:
        await _dry_run(admin, cfg, args, out, through_daemon=bool(plan.sessions or plan.forks))
        return EXIT_OK
    if not admin.shared and not plan.sessions and not plan.forks:
        return EXIT_OK
    try:
        done = await admin.close_sessions(plan)
    except StoreInUse as busy:
        # Through the daemon only if it is the one holding this store's lock: another
        # daemon would close its own same-named sessions.
        url = daemon_url(cfg, args.url)
        problem = await asyncio.to_thread(holding_problem, url, cfg.auth_token, busy.lock_token)
        if problem is None:
            return await asyncio.to_thread(apply_online, url, cfg.auth_token, plan, out)
        return _refused(busy, plan, problem)
    if not admin.shared:
        print(f"done: {admin.shown} changed", file=out)
        return EXIT_OK
    for sid in done.left:
        print(
            f"session {sid}: an event reached it since the plan (or it is gone): left as it is",
            file=sys.stderr,
        )
    by_node: dict[str, int] = {}
    for owner in done.closed.values():
        if owner is not None:
            by_node[owner] = by_node.get(owner, 0) + 1
    print(
        f"closed {len(done.closed)} sessions; owner nodes told to release them: "
        + (", ".join(f"{n} {c}" for n, c in sorted(by_node.items())) or "none"),
        file=out,
    )
    return EXIT_FAILED if done.forks_kept else EXIT_OK


def _refused(busy: StoreInUse, plan: Cleanup | None, problem: str = "") -> int:
    print(
        f"ramakv-admin: {busy.store} is in use by {busy.holder} (its lock is held"
        f"{'' if plan is None else ' and ' + problem}); stop it first",
        file=sys.stderr,
    )
    return EXIT_RUNNING


async def _dry_run(
    admin: StoreAdmin, cfg: Config, args: argparse.Namespace, out: TextIO, through_daemon: bool
) -> None:
    """Say that nothing changed, and what the real run would do about running daemons."""
    print("dry run: nothing changed (add --yes to act)", file=out)
    where = admin.shown
    if admin.shared:
        if args.command != "vacuum":
            print("with --yes each session's owner node is told to release it", file=out)
        return
    holder = admin.holder()
    if holder is None:
        print(f"with --yes: {where} is changed directly (no daemon holds it)", file=out)
        return
    url = daemon_url(cfg, args.url)
    problem = (
        await asyncio.to_thread(holding_problem, url, cfg.auth_token, admin.lock_token())
        if through_daemon
        else None
    )
    if through_daemon and problem is None:
        print(
            f"with --yes: through the daemon at {url} ({holder} holds the store), "
            "one session_close per listed session, each only if no event reached it since",
            file=out,
        )
        return
    why = "" if not through_daemon else f" and {problem}"
    refused = f"with --yes: refused (exit {EXIT_RUNNING})"
    print(f"{refused}: {where} is in use by {holder}{why}", file=out)


if __name__ == "__main__":
    sys.exit(main())
