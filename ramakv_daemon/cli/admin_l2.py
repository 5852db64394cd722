"""ramakv-admin's disk tier commands: ``l2-report`` (the stock server's fs L2 folder: files,
bytes, dead vs referenced, the budget) and ``l2-cleanup`` (its dead chunks, when asked)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from ramakv_daemon.adapters.backends.lmcache_mp import LMCacheMPBackend
from ramakv_daemon.admin_port import AdminView
from ramakv_daemon.cli.admin_plan import parse_duration
from ramakv_daemon.config import Config
from ramakv_daemon.core.l2_budget import L2File, Referenced, plan_l2
from ramakv_daemon.sweeps.l2_budget import Deleted, delete_chunks, deployment_scan

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_commands(sub: argparse._SubParsersAction) -> None:
    """The two subcommands, on ramakv-admin's parser."""
    r = sub.add_parser("l2-report", help="the stock server's disk tier: files, bytes, dead")
    _common(r)
    r.add_argument("--json", action="store_true")
    c = sub.add_parser(
        "l2-cleanup",
        help="delete the disk tier's dead chunks (no stored session or fork names them)",
    )
    _common(c)
    c.add_argument(
        "--older-than",
        type=parse_duration,
        metavar="DURATION",
        help="only chunks written (or last referenced) longer ago than this",
    )
    c.add_argument(
        "--over-budget",
        action="store_true",
        help="only as many, oldest first, as l2_budget_bytes needs (what the daemon does)",
    )
    c.add_argument(
        "--files-only",
        action="store_true",
        help="remove the files without asking the server to drop its L1 copies first",
    )
    act = c.add_mutually_exclusive_group()
    act.add_argument("--yes", action="store_true", help="act (default: dry run)")
    act.add_argument("--dry-run", action="store_true", help="list only (the default)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--deployment",
        help="a [[deployments]] name: its lmcache_mp_l2_path, budget and namespace's sessions",
    )
    p.add_argument("--path", help="the fs L2 folder (default: the config's lmcache_mp_l2_path)")
    p.add_argument("--model", help="the deployment's model (default: the config's model_name)")


def referenced_by(view: AdminView, namespace: str | None = None) -> Referenced:
    """Named by a stored session (active or suspended) or an open fork, of ``namespace``
    (None: of any namespace, as the daemon's top-level folder is judged)."""
    named: set[str] = set()
    for s in view.sessions:
        if namespace is None or s.namespace == namespace:
            named.update(s.chunk_hashes)
    for f in view.forks:
        if namespace is None or f.namespace == namespace:
            named.update(f.hashes)
    return named.__contains__


@dataclass(frozen=True, slots=True)
class Target:
    """The folder a command reads, whose files are whose, and its budget."""

    path: str
    model: str
    budget: int
    namespace: str | None  # whose sessions name its chunks (None: every namespace's)
    url: str  # the stock server whose all-tier delete goes first


def _where(args: argparse.Namespace, cfg: Config) -> Target | str:
    """The folder, model, budget and namespace, or why there is none."""
    path, budget, namespace = cfg.lmcache_mp_l2_path, cfg.l2_budget_bytes, None
    url = cfg.lmcache_url
    if args.deployment is not None:
        dep = next((d for d in cfg.deployments if d.name == args.deployment), None)
        if dep is None:
            names = ", ".join(d.name for d in cfg.deployments) or "none configured"
            return f"unknown deployment {args.deployment!r} (deployments: {names})"
        namespace = dep.key
        url = dep.lmcache_url or url
        if dep.l2_path is not None:
            path = dep.l2_path
            budget = budget if dep.l2_budget_bytes is None else dep.l2_budget_bytes
    path = args.path or path
    model = args.model or cfg.model_name
    if not path:
        return "no fs L2 folder: give --path or set lmcache_mp_l2_path in the config"
    if not model:
        return "no model: give --model or set model_name in the config (vLLM's --model)"
    return Target(path, model, budget, namespace, url)


async def run(args: argparse.Namespace, cfg: Config, view: AdminView, out: TextIO) -> int:
    """l2-report or l2-cleanup."""
    where = _where(args, cfg)
    if isinstance(where, str):
        print(f"ramakv-admin: {where}", file=sys.stderr)
        return EXIT_USAGE
    path, model, budget = where.path, where.model, where.budget
    try:
        mine, others = await asyncio.to_thread(deployment_scan, path, model)
    except OSError as err:
        print(f"ramakv-admin: cannot read the fs L2 folder {path}: {err}", file=sys.stderr)
        return EXIT_FAILED
    referenced = referenced_by(view, where.namespace)
    if args.command == "l2-report":
        plan = plan_l2(mine.files, referenced, budget)
        rep = {
            "path": path,
            "model_name": model,
            **plan.as_dict(),
            "temporary_files": mine.temporary,
            "other_entries": mine.other,
            "other_bytes": mine.other_bytes,
            "other_models": _models(others.files),
        }
        if args.json:
            json.dump(rep, out, indent=2, sort_keys=True)
            print(file=out)
        else:
            _print_report(rep, out)
        return EXIT_OK
    if args.over_budget and budget <= 0:
        print(
            "ramakv-admin: --over-budget needs l2_budget_bytes > 0 in the config", file=sys.stderr
        )
        return EXIT_USAGE
    before = time.time() - args.older_than if args.older_than is not None else None
    plan = plan_l2(mine.files, referenced, budget, all_dead=not args.over_budget, before=before)
    print(f"fs L2 folder: {path}  model: {model}", file=out)
    for c in plan.delete:
        print(f"delete {c.chunk_hash}  files={len(c.files)}  bytes={c.size}", file=out)
    print(
        f"{len(plan.delete)} dead chunks, {plan.delete_bytes} bytes "
        f"({plan.referenced_chunks} referenced chunks kept)",
        file=out,
    )
    if not args.yes:
        print("dry run: nothing changed (add --yes to act)", file=out)
        return EXIT_OK
    backend = None
    if not args.files_only and cfg.backend == "lmcache_mp" and not cfg.noop_backend:
        backend = LMCacheMPBackend(where.url, model, cfg.world_size, cfg.cache_salt)
    try:
        done = await delete_chunks(
            path, plan.delete, referenced, backend, progress=_progress(len(plan.delete))
        )
    except OSError as err:
        print(f"ramakv-admin: removing a file failed: {err}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if backend is not None:
            await backend.close()
    print(f"done: deleted {done.chunks} chunks ({done.files} files, {done.bytes} bytes)", file=out)
    if done.server_failures:
        print(
            f"the server's delete failed {done.server_failures} times (its L1 may keep "
            "copies until it evicts them); the files were removed",
            file=sys.stderr,
        )
    return EXIT_OK


def _models(files: list[L2File]) -> dict[str, dict[str, int]]:
    out: dict[str, Counter[str]] = {}
    for f in files:
        row = out.setdefault(f.model_name, Counter())
        row["files"] += 1
        row["bytes"] += f.size
    return {m: dict(c) for m, c in sorted(out.items())}


def _progress(total: int) -> Callable[[Deleted], None]:
    """Every slice's progress, on stderr (a clean-up of millions of files takes minutes)."""

    def say(done: Deleted) -> None:
        print(f"... {done.chunks}/{total} chunks, {done.bytes} bytes", file=sys.stderr)

    return say


def _print_report(rep: dict[str, Any], out: TextIO) -> None:
    gib = 1024**3
    print(f"fs L2 folder: {rep['path']}  model: {rep['model_name']}", file=out)
    print(
        f"  files: {rep['files']}  bytes: {rep['bytes']} ({rep['bytes'] / gib:.2f} GiB)  "
        f"chunks: {rep['chunks']}",
        file=out,
    )
    print(
        f"  referenced: {rep['referenced_chunks']} chunks, {rep['referenced_bytes']} bytes; "
        f"dead: {rep['dead_chunks']} chunks, {rep['dead_bytes']} bytes",
        file=out,
    )
    if rep["budget_bytes"]:
        state = "OVER" if rep["over_budget"] else "within"
        print(
            f"  budget: {rep['bytes']} / {rep['budget_bytes']} bytes ({state}); the daemon "
            f"deletes {rep['delete_chunks']} dead chunks ({rep['delete_bytes']} bytes) to fit"
            + ("; still over: the rest is referenced" if rep["still_over_budget"] else ""),
            file=out,
        )
    else:
        print("  budget: none (l2_budget_bytes = 0: the daemon deletes nothing)", file=out)
    if rep["temporary_files"] or rep["other_entries"]:
        print(
            f"  also: {rep['temporary_files']} writes in progress, {rep['other_entries']} "
            f"other entries ({rep['other_bytes']} bytes), left alone",
            file=out,
        )
    for model, row in rep["other_models"].items():
        print(
            f"  other model {model}: {row['files']} files, {row['bytes']} bytes (never "
            "deleted for this deployment)",
            file=out,
        )
