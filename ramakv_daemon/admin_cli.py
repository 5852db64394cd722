"""``ramakv-admin``: reports and explicit clean-ups of a daemon's SQLite file; never automatic."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sqlite3
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from ramakv_daemon import config as config_mod
from ramakv_daemon.adapters.store_lock import StoreLock, holder_of
from ramakv_daemon.config import Config, ConfigError
from ramakv_daemon.core.fork import Fork
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.core.session import Session
from ramakv_daemon.deployments import DEFAULT_NAMESPACE
from ramakv_sdk.version import add_version_flag

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_RUNNING = 0, 1, 2, 4
IDLE_BUCKETS = ((60, "<1m"), (600, "<10m"), (3600, "<1h"), (86400, "<1d"), (604800, "<7d"))
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30m, 12h, 7d)")
    return float(m.group(1)) * _UNITS[m.group(2)]


# ---- reading the file --------------------------------------------------------------------
def connect(path: str, *, write: bool) -> sqlite3.Connection:
    """Open the store; read-only unless ``write`` (never creates a file)."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no session store at {path}")
    mode = "rw" if write else "ro"
    con = sqlite3.connect(f"file:{path}?mode={mode}", uri=True, timeout=5)
    con.execute("PRAGMA busy_timeout=5000")
    return con


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in con.execute(f"PRAGMA table_info({table})")}


def load_sessions(con: sqlite3.Connection) -> list[Session]:
    """Every stored session, as the daemon would load it (corrupt rows skipped)."""
    has_ns = "namespace" in _columns(con, "session_state")
    ns_col = "st.namespace" if has_ns else "''"
    rows = con.execute(
        "SELECT s.session_id, s.map_json, s.turn_count, st.suspended, "
        f"st.last_event_ts, {ns_col} FROM sessions s "
        "LEFT JOIN session_state st ON st.session_id = s.session_id"
    ).fetchall()
    out = []
    for sid, map_json, turns, suspended, ts, ns in rows:
        try:
            hashes = tuple(json.loads(map_json))
        except (ValueError, TypeError):
            continue
        out.append(
            Session(sid, hashes, int(turns or 0), bool(suspended), float(ts or 0.0), ns or "")
        )
    return out


def load_forks(con: sqlite3.Connection) -> list[Fork]:
    """Every open fork, as the daemon would load it; a file the daemon has not opened
    since fork ids exist keeps them in session_state.fork_holds_json (given ids < 0)."""
    out: list[Fork] = []
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "forks" in tables:
        for fid, sid, ns, hashes_json, ts in con.execute(
            "SELECT fork_id, session_id, namespace, hashes_json, created_ts FROM forks"
        ):
            try:
                out.append(Fork(int(fid), sid, tuple(json.loads(hashes_json)), float(ts), ns or ""))
            except (ValueError, TypeError):
                continue
    if "fork_holds_json" in _columns(con, "session_state"):
        ns_col = "namespace" if "namespace" in _columns(con, "session_state") else "''"
        legacy = con.execute(
            f"SELECT session_id, fork_holds_json, {ns_col}, last_event_ts FROM session_state "
            "WHERE fork_holds_json NOT IN ('', '[]')"
        ).fetchall()
        for sid, holds, ns, ts in legacy:
            try:
                for hold in json.loads(holds):
                    out.append(Fork(-len(out) - 1, sid, tuple(hold), float(ts or 0.0), ns or ""))
            except (ValueError, TypeError):
                continue
    return out


def load_outbox(con: sqlite3.Connection) -> Counter[tuple[str, str]]:
    """(namespace, mode) -> evictions waiting for delivery."""
    from ramakv_daemon.adapters.sqlite_store import outbox_view

    return Counter((ns, mode) for (ns, _h), mode in outbox_view(con).items())


# ---- is the daemon running? -----------------------------------------------------------------
@contextlib.contextmanager
def exclusive(path: str) -> Iterator[tuple[bool, str]]:
    """Yield (True, "") while holding the store's lock (no daemon has the file open), else
    (False, who holds it: "pid 123 (ram-a-kv)"). While held here, a daemon refuses to start
    on the file, naming this process."""
    lock = StoreLock(path, "ramakv-admin")
    try:
        free = lock.acquire()
    except OSError:
        yield True, ""  # the lock file cannot be created: no daemon could have either
        return
    try:
        yield (True, "") if free else (False, holder_of(lock.path))
    finally:
        lock.release()


def lock_holder(path: str) -> str | None:
    """Who holds the store's lock now ("pid 123 (ram-a-kv)"), or None when nobody does."""
    with exclusive(path) as (free, holder):
        return None if free else holder


def daemon_url(cfg: Config, url: str | None) -> str:
    """The daemon's base URL: --url, else listen_addr from the config."""
    if url:
        return url.rstrip("/")
    host, port = cfg.host_port
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def post_event(url: str, token: str, body: dict[str, Any], timeout: float = 5.0) -> dict:
    """POST one event to the daemon; its JSON answer."""
    req = urllib.request.Request(
        url + "/event",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {token}"} if token else {}),
        },
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - operator URL
        return json.loads(resp.read())


def daemon_alive(url: str, token: str) -> bool:
    """True when a daemon answers health at ``url``."""
    try:
        return bool(post_event(url, token, {"type": "health"}, timeout=1.0).get("ok"))
    except (OSError, ValueError, urllib.error.URLError):
        return False


# ---- reports ------------------------------------------------------------------------------
def report(
    sessions: list[Session],
    outbox: Counter,
    cfg: Config,
    now: float,
    forks: list[Fork] | None = None,
) -> dict:
    """Sessions per namespace and state, idle ages, chunks, budget use, outbox, strays."""
    configured = {DEFAULT_NAMESPACE: "default"}
    budgets = {DEFAULT_NAMESPACE: cfg.ddr_budget_chunks}
    for d in cfg.deployments:
        configured[d.key] = d.name
        budgets[d.key] = d.ddr_budget_chunks
    spaces: dict[str, dict[str, Any]] = {}
    refs: dict[str, Counter[str]] = {}
    for s in sessions:
        row = spaces.setdefault(s.namespace, _empty_row(s.namespace, configured, budgets))
        row["sessions"][s.state] += 1
        row["idle"][_bucket(now - s.last_event_ts if s.last_event_ts else None)] += 1
        counts = refs.setdefault(s.namespace, Counter())
        counts.update(s.held_hashes())
        row["stored_chunks"].update(s.chunk_hashes)
    for f in forks or ():
        row = spaces.setdefault(f.namespace, _empty_row(f.namespace, configured, budgets))
        row["open_forks"] += 1
        refs.setdefault(f.namespace, Counter()).update(f.hashes)
    for (ns, mode), n in outbox.items():
        spaces.setdefault(ns, _empty_row(ns, configured, budgets))["outbox"][mode] += n
    for ns, row in spaces.items():
        counts = refs.get(ns, Counter())
        row["chunks_referenced"] = len(counts)
        row["references"] = sum(counts.values())
        row["stored_chunks"] = len(row["stored_chunks"])
        budget = row["ddr_budget_chunks"]
        row["budget_use"] = round(len(counts) / budget, 3) if budget else None
        row["outbox"] = dict(row["outbox"])
    unconfigured = sorted(ns for ns in spaces if ns not in configured)
    return {
        "namespaces": dict(sorted(spaces.items())),
        "unconfigured": unconfigured,
        "sessions_total": len(sessions),
    }


def _empty_row(ns: str, configured: dict[str, str], budgets: dict[str, int]) -> dict:
    return {
        "deployment": configured.get(ns),
        "configured": ns in configured,
        "sessions": {"active": 0, "suspended": 0},
        "idle": dict.fromkeys([b for _, b in IDLE_BUCKETS] + [">=7d", "never"], 0),
        "stored_chunks": set(),
        "ddr_budget_chunks": budgets.get(ns, 0),
        "open_forks": 0,
        "outbox": Counter(),
    }


def _bucket(age: float | None) -> str:
    if age is None:
        return "never"
    for limit, name in IDLE_BUCKETS:
        if age < limit:
            return name
    return ">=7d"


def print_report(rep: dict, out: TextIO) -> None:
    """The report as text."""
    print(f"sessions: {rep['sessions_total']}", file=out)
    for ns, row in rep["namespaces"].items():
        name = row["deployment"] or "NOT CONFIGURED"
        print(f"\nnamespace {ns or '(default)'}  [{name}]", file=out)
        print(
            f"  sessions: {row['sessions']['active']} active, "
            f"{row['sessions']['suspended']} suspended",
            file=out,
        )
        idle = ", ".join(f"{k} {v}" for k, v in row["idle"].items() if v)
        print(f"  idle age: {idle or '-'}", file=out)
        print(
            f"  chunks: {row['chunks_referenced']} referenced ({row['references']} "
            f"references), {row['stored_chunks']} in stored maps",
            file=out,
        )
        if row["ddr_budget_chunks"]:
            print(
                f"  DDR budget: {row['chunks_referenced']} / {row['ddr_budget_chunks']} "
                f"chunks referenced ({row['budget_use']:.0%})",
                file=out,
            )
        if row.get("open_forks"):
            print(f"  open forks: {row['open_forks']}", file=out)
        box = ", ".join(f"{m} {n}" for m, n in row["outbox"].items())
        print(f"  eviction outbox: {box or 'empty'}", file=out)
    if rep["unconfigured"]:
        print(
            "\nin the database but not configured (never deleted automatically; "
            "`ramakv-admin purge-namespace NS` to remove):",
            file=out,
        )
        for ns in rep["unconfigured"]:
            print(f"  {ns}", file=out)


# ---- clean-ups ----------------------------------------------------------------------------
@dataclass(slots=True)
class Cleanup:
    """What a clean-up will do: sessions to close, and the evictions that follow."""

    sessions: list[Session]
    evict: dict[str, dict[str, str]]  # namespace -> hash -> mode
    forks: list[Fork] = field(default_factory=list)  # forks ended too (a namespace purge)

    def describe(self, out: TextIO, now: float) -> None:
        for s in self.sessions:
            idle = now - s.last_event_ts if s.last_event_ts else float("inf")
            print(
                f"close {s.session_id}  namespace={s.namespace or '(default)'}  "
                f"state={s.state}  idle={_fmt_age(idle)}  chunks={len(s.chunk_hashes)}",
                file=out,
            )
        for f in self.forks:
            print(
                f"end fork {f.fork_id} of {f.session_id}  "
                f"namespace={f.namespace or '(default)'}  chunks={len(f.hashes)}",
                file=out,
            )
        n = sum(len(v) for v in self.evict.values())
        forks = f", {len(self.forks)} forks" if self.forks else ""
        print(
            f"{len(self.sessions)} sessions{forks}, {n} chunks to evict once the daemon runs",
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
    evict: dict[str, dict[str, str]] = {}
    for ns in sorted({v.namespace for v in victims} | {f.namespace for f in ended}):
        m = SessionManager(max_sessions=0, namespace=ns)
        m.load(by_ns.get(ns, []), forks_of.get(ns, []))
        changes = [m.session_close(v.session_id) for v in victims if v.namespace == ns]
        changes += [m.session_fork_end(f.session_id, f.fork_id) for f in ended]
        rows = evict.setdefault(ns, {})
        for change in changes:
            rows.update(dict.fromkeys(change.evict_delete, "delete"))
            rows.update(dict.fromkeys(change.evict_demote, "demote"))
    return Cleanup(sorted(victims, key=lambda s: (s.namespace, s.session_id)), evict, ended)


def apply_offline(con: sqlite3.Connection, plan: Cleanup) -> None:
    """Delete the sessions and queue their evictions, in one transaction."""
    has_ns_box = "namespace" in _columns(con, "ns_evict_outbox")
    with con:
        for s in plan.sessions:
            con.execute("DELETE FROM sessions WHERE session_id = ?", (s.session_id,))
            con.execute("DELETE FROM session_state WHERE session_id = ?", (s.session_id,))
        for f in plan.forks:
            if f.fork_id > 0:
                con.execute("DELETE FROM forks WHERE fork_id = ?", (f.fork_id,))
            else:  # a hold of a file the daemon has not migrated yet
                con.execute(
                    "UPDATE session_state SET fork_holds_json = '[]' WHERE session_id = ?",
                    (f.session_id,),
                )
        for ns, rows in plan.evict.items():
            for h, mode in rows.items():
                if ns == DEFAULT_NAMESPACE:
                    con.execute(
                        "INSERT INTO evict_outbox (chunk_hash, mode) VALUES (?, ?) "
                        "ON CONFLICT(chunk_hash) DO UPDATE SET mode=excluded.mode",
                        (h, mode),
                    )
                elif has_ns_box:
                    con.execute(
                        "INSERT INTO ns_evict_outbox (namespace, chunk_hash, mode) "
                        "VALUES (?, ?, ?) ON CONFLICT(namespace, chunk_hash) DO UPDATE SET "
                        "mode=excluded.mode",
                        (ns, h, mode),
                    )


def apply_online(url: str, token: str, plan: Cleanup, out: TextIO) -> int:
    """Close exactly the planned sessions through the running daemon's session_close."""
    failed = 0
    for s in plan.sessions:
        body = post_event(
            url,
            token,
            {"type": "session_close", "session_id": s.session_id, "namespace": s.namespace},
        )
        if not body.get("ok"):
            failed += 1
            print(f"session_close {s.session_id}: {body.get('error')}", file=sys.stderr)
    for f in plan.forks:
        body = post_event(
            url,
            token,
            {
                "type": "session_fork_end",
                "session_id": f.session_id,
                "fork_id": f.fork_id,
                "namespace": f.namespace,
            },
        )
        if not body.get("ok"):
            failed += 1
            print(f"session_fork_end {f.fork_id}: {body.get('error')}", file=sys.stderr)
    print(f"closed {len(plan.sessions) - failed} sessions through the daemon at {url}", file=out)
    return EXIT_FAILED if failed else EXIT_OK


# ---- command line -------------------------------------------------------------------------
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
    i = sub.add_parser("identity", help="print a deployment identity's namespace")
    i.add_argument("--from", dest="path", required=True)
    i.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Run one command."""
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    if args.command == "identity":
        from ramakv_daemon.identity import main as identity_main

        return identity_main(["--from", args.path] + (["--json"] if args.json else []), out)
    try:
        cfg, warnings = config_mod.load_for_cli(args.config)
    except ConfigError as err:
        print(f"ramakv-admin: {err}", file=sys.stderr)
        return EXIT_USAGE
    for w in warnings:
        if "not found" not in w:
            print(f"ramakv-admin: {w}", file=sys.stderr)
    pg_url = (
        args.db
        if (args.db or "").startswith(config_mod.PG_SCHEMES)
        else (None if args.db else cfg.session_store_url or None)
    )
    if pg_url:
        from ramakv_daemon import admin_postgres

        return admin_postgres.run(args, cfg, pg_url, out)
    path = args.db or cfg.session_store_path
    try:
        return _run(args, cfg, path, out)
    except FileNotFoundError as err:
        print(f"ramakv-admin: {err}", file=sys.stderr)
        return EXIT_USAGE
    except sqlite3.Error as err:
        print(f"ramakv-admin: {path}: {err}", file=sys.stderr)
        return EXIT_FAILED


def _run(args: argparse.Namespace, cfg: Config, path: str, out: TextIO) -> int:
    now = time.time()
    if args.command == "report":
        con = connect(path, write=False)
        try:
            rep = report(load_sessions(con), load_outbox(con), cfg, now, load_forks(con))
        finally:
            con.close()
        if args.json:
            json.dump({"store": path, **rep}, out, indent=2, sort_keys=True)
            print(file=out)
        else:
            print(f"store: {path}", file=out)
            print_report(rep, out)
        return EXIT_OK
    con = connect(path, write=False)
    try:
        sessions = load_sessions(con)
        forks = load_forks(con)
    finally:
        con.close()
    print(f"store: {path}", file=out)
    if args.command == "vacuum":
        size = Path(path).stat().st_size
        print(f"VACUUM {path} ({size} bytes)", file=out)
        if not args.yes:
            _dry_run(path, cfg, args, out, through_daemon=False)
            return EXIT_OK
        return _offline(path, cfg, args, out, lambda con: con.execute("VACUUM"))
    plan = plan_for(args, cfg, sessions, forks, now, path)
    if plan is None:
        return EXIT_USAGE
    plan.describe(out, now)
    if not args.yes:
        _dry_run(path, cfg, args, out, through_daemon=bool(plan.sessions or plan.forks))
        return EXIT_OK
    if not plan.sessions and not plan.forks:
        return EXIT_OK
    return _offline(path, cfg, args, out, lambda con: apply_offline(con, plan), plan)


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
    """The default namespace, every configured one, and every one the file holds."""
    return (
        {DEFAULT_NAMESPACE}
        | {d.key for d in cfg.deployments}
        | {s.namespace for s in sessions}
        | {f.namespace for f in forks}
    )


def _dry_run(
    path: str, cfg: Config, args: argparse.Namespace, out: TextIO, through_daemon: bool
) -> None:
    """Say that nothing changed, and what the real run would do about a running daemon."""
    print("dry run: nothing changed (add --yes to act)", file=out)
    holder = lock_holder(path)
    if holder is None:
        print(f"with --yes: {path} is changed directly (no daemon holds it)", file=out)
        return
    url = daemon_url(cfg, args.url)
    if through_daemon and daemon_alive(url, cfg.auth_token):
        print(
            f"with --yes: through the daemon at {url} ({holder} holds the store), "
            "one session_close per listed session",
            file=out,
        )
        return
    why = "" if not through_daemon else f" and no daemon answers at {url}"
    print(f"with --yes: refused (exit {EXIT_RUNNING}): {path} is in use by {holder}{why}", file=out)


def _offline(
    path: str,
    cfg: Config,
    args: argparse.Namespace,
    out: TextIO,
    act: Any,
    plan: Cleanup | None = None,
) -> int:
    """Act on the file if no daemon has it open; else through the daemon, or refuse.

    A daemon holds a shared lock on ``<db>.lock`` while the file is open, so a free lock
    means no daemon uses this file (whatever answers at the URL)."""
    url = daemon_url(cfg, args.url)
    with exclusive(path) as (free, holder):
        if free:
            if args.command == "vacuum":
                con = sqlite3.connect(path, isolation_level=None, timeout=5)
            else:
                con = connect(path, write=True)
            try:
                act(con)
            finally:
                con.close()
            print(f"done: {path} changed", file=out)
            return EXIT_OK
    if plan is not None and daemon_alive(url, cfg.auth_token):
        return apply_online(url, cfg.auth_token, plan, out)
    print(
        f"ramakv-admin: {path} is in use by {holder} (its lock is held"
        f"{'' if plan is None else ' and no daemon answers at ' + url}); stop it first",
        file=sys.stderr,
    )
    return EXIT_RUNNING


if __name__ == "__main__":
    sys.exit(main())
