"""ramakv-admin's clean-up plans: which sessions close-idle / purge-namespace close, and why."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TextIO

from ramakv_daemon.admin_port import Cleanup
from ramakv_daemon.config import Config
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session
from ramakv_daemon.deployments import DEFAULT_NAMESPACE
from ramakv_daemon.ports import EvictMode

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30m, 12h, 7d)")
    return float(m.group(1)) * _UNITS[m.group(2)]


def describe(plan: Cleanup, out: TextIO, now: float) -> None:
    """One line per session to close and fork to end, then the totals."""
    for s in plan.sessions:
        idle = now - s.last_event_ts if s.last_event_ts else float("inf")
        print(
            f"close {s.session_id}  namespace={s.namespace or '(default)'}  "
            f"state={s.state}  idle={_fmt_age(idle)}  chunks={len(s.chunk_hashes)}",
            file=out,
        )
    for f in plan.forks:
        print(
            f"end fork {f.fork_id} of {f.session_id}  "
            f"namespace={f.namespace or '(default)'}  chunks={len(f.hashes)}",
            file=out,
        )
    n = sum(len(v) for v in plan.evict.values())
    forks = f", {len(plan.forks)} forks" if plan.forks else ""
    print(
        f"{len(plan.sessions)} sessions{forks}, {n} chunks to evict once the daemon runs",
        file=out,
    )


def _fmt_age(age: float) -> str:
    if age == float("inf"):
        return "never"
    for unit, secs in (("d", 86400), ("h", 3600), ("m", 60)):
        if age >= secs:
            return f"{age / secs:.1f}{unit}"
    return f"{age:.0f}s"


def plan_close(
    all_sessions: list[Session],
    victims: list[Session],
    forks: list[Fork] | None = None,
    purge: str | None = None,
) -> Cleanup:
    """Close ``victims`` the way the daemon's session_close would (the pure core decides):
    their open forks stay held, except in ``purge``, a namespace whose forks end too."""
    by_ns: dict[str, list[Session]] = {}
    for s in all_sessions:
        by_ns.setdefault(s.namespace, []).append(s)
    forks_of: dict[str, list[Fork]] = {}
    for f in forks or ():
        forks_of.setdefault(f.namespace, []).append(f)
    ended = list(forks_of.get(purge, [])) if purge is not None else []
    evict: dict[str, dict[str, EvictMode]] = {}
    for ns in sorted({v.namespace for v in victims} | {f.namespace for f in ended}):
        m = SessionManager(max_sessions=0, namespace=ns)
        m.load(by_ns.get(ns, []), forks_of.get(ns, []))
        changes = [m.session_close(v.session_id) for v in victims if v.namespace == ns]
        purged = [m.session_fork_end(f.session_id, f.fork_id) for f in ended]
        rows = evict.setdefault(ns, {})
        for change in changes + purged:
            rows.update(dict.fromkeys(change.evict_delete, EvictMode.DELETE))
            rows.update(dict.fromkeys(change.evict_demote, EvictMode.DEMOTE))
            rows.update(dict.fromkeys(change.evict_cold, EvictMode.COLD))
        for change in purged:
            # The operator purges the namespace: nothing in it will be wanted again, so a
            # fork hold's last chunks are deleted, not only ordered cold as a fork_end's.
            rows.update(dict.fromkeys(change.evict_cold, EvictMode.DELETE))
    return Cleanup(sorted(victims, key=lambda s: (s.namespace, s.session_id)), evict, ended)


def plan_for(
    args: argparse.Namespace,
    cfg: Config,
    sessions: list[Session],
    forks: list[Fork],
    now: float,
    where: str,
) -> Cleanup | None:
    """What close-idle or purge-namespace will do; None (said why) for an unknown
    namespace. ``where`` names the store in that message."""
    aliases = {d.name: d.key for d in cfg.deployments}
    wanted = args.namespace
    ns = None if wanted is None else aliases.get(wanted, wanted)
    if ns is not None and ns not in _known_namespaces(cfg, sessions, forks):
        names = ", ".join(sorted(aliases)) or "none"
        print(
            f"ramakv-admin: unknown namespace {wanted!r}: not a configured deployment "
            f"(configured: {names}) and no session or fork in {where} has it",
            file=sys.stderr,
        )
        return None
    if args.command == "purge-namespace":
        victims = [s for s in sessions if s.namespace == ns]
    else:
        victims = [
            s
            for s in sessions
            if now - s.last_event_ts > args.older_than
            and (ns is None or s.namespace == ns)
            and (args.state is None or s.state == args.state)
        ]
    purge = ns if args.command == "purge-namespace" else None
    return plan_close(sessions, victims, forks, purge)


def _known_namespaces(cfg: Config, sessions: list[Session], forks: list[Fork]) -> set[str]:
    """The default namespace, every configured one, and every one the store holds."""
    return (
        {DEFAULT_NAMESPACE}
        | {d.key for d in cfg.deployments}
        | {s.namespace for s in sessions}
        | {f.namespace for f in forks}
    )
