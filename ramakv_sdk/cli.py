"""The ``ramakv`` command: send events, list sessions, show a map, follow the trace."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from ramakv_protocol.dispatch import MARKER_KINDS, TraceReader, is_kind
from ramakv_protocol.records import (
    BackendRecord,
    BudgetRecord,
    DisconnectedMarker,
    EventRecord,
    EvictWindowRecord,
    ReconnectedMarker,
    SnapshotHeader,
    SnapshotPart,
)
from ramakv_protocol.resume import drop_words
from ramakv_sdk.client import AsyncClient
from ramakv_sdk.config import DEFAULT_DAEMON_URL, load_config
from ramakv_sdk.errors import DaemonUnavailable, RamAKvError
from ramakv_sdk.version import add_version_flag

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs and tests)."""
    p = argparse.ArgumentParser(
        prog="ramakv",
        description="Talk to a ram-a-kv daemon. Exit codes: 0 ok, 1 the daemon answered "
        "ok:false (its error on stderr), 2 usage error, 3 daemon unreachable.",
    )
    p.add_argument(
        "--url",
        help="daemon URL (default: daemon_url from "
        "~/.config/ram-a-kv/config.toml, else " + DEFAULT_DAEMON_URL + ")",
    )
    p.add_argument("--token", help="bearer token (default: auth_token from the same config)")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per request (5)")
    add_version_flag(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser("send", help="POST one raw JSON event and print its data")
    s.add_argument("json", help="the event as JSON, or - to read it from stdin")

    e = sub.add_parser("event", help="build and send one event")
    e.add_argument("type", help="event type, e.g. turn_start, turn_end, chunk_info")
    e.add_argument("--session", "-s", help="session_id")
    e.add_argument(
        "--hashes",
        help="comma-separated chunk hashes; write --hashes=-1a,2b when "
        "the first one starts with '-'",
    )
    e.add_argument(
        "--hashes-file", help="file with chunk hashes (one per line, or commas); - for stdin"
    )
    e.add_argument("--source", help="source_session_id (snapshot_restore)")
    e.add_argument(
        "--fork-id",
        type=int,
        help="fork_id (session_fork_end; without it the session's newest open fork)",
    )
    e.add_argument("--dry-run", action="store_true", help="dry_run: true (chunk_evict)")
    e.add_argument("--force", action="store_true", help="force: true (chunk_evict)")
    e.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other field; VALUE is parsed as JSON, else taken as a string",
    )

    ls = sub.add_parser("sessions", help="list sessions (list_sessions)")
    ls.add_argument(
        "--state",
        choices=("active", "suspended", "closed"),
        help="closed: sessions closed with open forks",
    )
    ls.add_argument("--limit", type=int)
    ls.add_argument("--offset", type=int)
    ls.add_argument("--json", action="store_true", help="print the raw data as JSON")

    m = sub.add_parser("map", help="print a session's chunk map, one hash per line")
    m.add_argument("session_id")
    m.add_argument("--json", action="store_true", help="print the raw data as JSON")

    t = sub.add_parser("trace", help="follow the trace stream (Ctrl-C to stop)")
    t.add_argument("--since", type=int, help="resume after this seq (else a snapshot first)")
    t.add_argument("--session", help="only events touching this session")
    t.add_argument("--json", action="store_true", help="one JSON message per line")
    t.add_argument("--count", type=int, help="stop after this many events")

    sub.add_parser("health", help="daemon health")
    ev = sub.add_parser(
        "events",
        help="list the events the daemon knows (list_events): the "
        "nine contract events, then the admin events",
    )
    ev.add_argument("--json", action="store_true", help="print the raw data as JSON")
    return p


def resolve(args: argparse.Namespace) -> tuple[str, str | None]:
    """URL and token: flags first, else the SDK config (its token only for its own URL)."""
    cfg = load_config()
    url = (args.url or (cfg.daemon_url if cfg else DEFAULT_DAEMON_URL)).rstrip("/")
    token = args.token
    if token is None and cfg is not None and cfg.auth_token and url == cfg.daemon_url:
        token = cfg.auth_token
    return url, token


def parse_hashes(text: str) -> list[str]:
    """Hashes separated by commas and/or whitespace."""
    return [h for h in text.replace(",", " ").split() if h]


def read_source(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    with open(name, encoding="utf-8") as f:
        return f.read()


def build_event(args: argparse.Namespace) -> dict[str, Any]:
    """The payload for ``ramakv event``; ValueError on a bad combination."""
    hashes: list[str] | None = None
    if args.hashes is not None and args.hashes_file is not None:
        raise ValueError("give --hashes or --hashes-file, not both")
    if args.hashes is not None:
        hashes = parse_hashes(args.hashes)
    elif args.hashes_file is not None:
        hashes = parse_hashes(read_source(args.hashes_file))
    event: dict[str, Any] = {"type": args.type}
    if args.session is not None:
        event["session_id"] = args.session
    if args.type == "turn_end":
        if hashes is None:  # the daemon would refuse it: say so before sending
            raise ValueError(
                "turn_end needs --hashes or --hashes-file (--hashes= for an empty map)"
            )
        event["kv_transfer_params"] = {"chunk_hashes": hashes}
    elif hashes is not None:
        event["chunk_hashes"] = hashes
    if args.source is not None:
        event["source_session_id"] = args.source
    if args.fork_id is not None:
        event["fork_id"] = args.fork_id
    if args.dry_run:
        event["dry_run"] = True
    if args.force:
        event["force"] = True
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set wants KEY=VALUE, got {item!r}")
        try:
            event[key] = json.loads(value)
        except ValueError:
            event[key] = value
    return event


def dump(data: Any, out: TextIO) -> None:
    out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def age(ts: float | None, now: float) -> str:
    """'12s', '5m', '3h', '2d' ago; '-' when unknown."""
    if not ts:
        return "-"
    return duration(now - ts)


def duration(secs: float) -> str:
    """'12s', '5m', '3h', '2d'."""
    secs = max(0.0, secs)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{int(secs // size)}{unit}"
    return f"{int(secs)}s"


def forks_cell(forks: list[dict[str, Any]]) -> str:
    """Open forks as ``#id age``: '#3 2h, #7 5s'; '-' when none."""
    if not forks:
        return "-"
    return ", ".join(f"#{f['fork_id']} {duration(f.get('age_s', 0.0))}" for f in forks)


def print_sessions(data: dict[str, Any], out: TextIO) -> None:
    rows = [("SESSION", "STATE", "TURNS", "CHUNKS", "OPEN FORKS", "LAST EVENT")]
    now = time.time()
    for s in data["sessions"]:
        rows.append(
            (
                s["session_id"],
                s["state"],
                str(s["turn_count"]),
                str(s["chunk_count"]),
                forks_cell(s.get("forks") or []),
                age(s.get("last_event_ts"), now),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    out.write(f"{len(data['sessions'])} of {data['total']} sessions\n")


def print_events(data: dict[str, Any], out: TextIO) -> None:
    """list_events as two lists: the nine contract events, then the admin events."""
    for title, key in (("contract events", "events"), ("admin events", "admin_events")):
        specs = data.get(key) or {}
        out.write(f"{title} ({len(specs)}):\n")
        for name, spec in sorted(specs.items()):
            fields = [*spec.get("required", []), *(f"[{f}]" for f in spec.get("optional", []))]
            out.write(f"  {name}  {' '.join(fields)}\n".rstrip() + "\n")


class TraceLines(TraceReader[str]):
    """One human-readable line per trace message."""

    def on_snapshot(self, msg: SnapshotHeader) -> str:
        t = msg.get("totals") or {}
        return (
            f"#{msg.get('seq')} snapshot: {t.get('sessions', 0)} sessions, "
            f"{t.get('chunks', 0)} chunks, {t.get('references', 0)} references"
        )

    def on_snapshot_sessions(self, msg: SnapshotPart) -> str:
        rows = msg.get("sessions") or []
        return f"#{msg.get('seq')} snapshot part {msg.get('part')}: {len(rows)} sessions" + (
            " (last)" if msg.get("last") else ""
        )

    def on_disconnected(self, msg: DisconnectedMarker) -> str:
        what = drop_words(msg.get("error"))
        reason = msg.get("reason")
        return (
            f"-- {what}: {reason}; retrying with backoff"
            if reason
            else f"-- {what}; retrying with backoff"
        )

    def on_reconnected(self, msg: ReconnectedMarker) -> str:
        return f"-- reconnected, resuming after #{msg.get('since')}"

    def on_backend(self, msg: BackendRecord) -> str:
        return (
            f"#{msg.get('seq')} {_clock(msg)} backend {msg.get('op')} of {msg.get('count')} "
            f"chunks FAILED: status={msg.get('status')} {msg.get('detail')} "
            f"(backlog {msg.get('backlog')})"
        )

    def on_budget(self, msg: BudgetRecord) -> str:
        return (
            f"#{msg.get('seq')} {_clock(msg)} budget: demoted {len(msg.get('victims') or [])} "
            f"sessions, {len(msg.get('demote') or [])} chunks "
            f"({msg.get('usage_before')} -> {msg.get('usage_after')} of {msg.get('budget')})"
        )

    def on_evict_window(self, msg: EvictWindowRecord) -> str:
        return (
            f"#{msg.get('seq')} {_clock(msg)} evict window {msg.get('outcome')}: {msg.get('count')}"
        )

    def on_event(self, msg: EventRecord) -> str:
        return self.other(msg)

    def other(self, msg: Mapping[str, Any]) -> str:
        """An event record (and anything else, read as one)."""
        head = f"#{msg.get('seq')} {_clock(msg)} {msg.get('type')} {msg.get('session_id') or '-'}"
        if not msg.get("ok"):
            return f"{head} FAILED: {msg.get('error')}"
        data = msg.get("data") or {}
        fields = " ".join(f"{k}={v}" for k, v in data.items() if not isinstance(v, list | dict))
        extra = [
            f"{name}={len(msg[name])}"
            for name in ("prefetch", "evict", "demote", "cold")
            if msg.get(name)
        ]
        return " ".join(x for x in (head, "ok", fields, *extra) if x)


def _clock(msg: Mapping[str, Any]) -> str:
    return time.strftime("%H:%M:%S", time.localtime(msg.get("ts") or 0))


_LINES = TraceLines()


def trace_line(msg: dict[str, Any]) -> str:
    """One human-readable line per trace message."""
    return _LINES.read(msg)


async def follow(client: AsyncClient, args: argparse.Namespace, out: TextIO) -> int:
    seen = 0
    async with client.subscribe_trace(since=args.since, session=args.session) as sub:
        async for msg in sub:
            if args.json:
                out.write(json.dumps(msg) + "\n")
            else:
                target = sys.stderr if msg.get("kind") in MARKER_KINDS else out
                target.write(trace_line(msg) + "\n")
                target.flush()
            out.flush()
            if is_kind(msg, "event"):
                seen += 1
                if args.count is not None and seen >= args.count:
                    break
    return EXIT_OK


async def run(args: argparse.Namespace, out: TextIO) -> int:
    url, token = resolve(args)
    async with AsyncClient(url, timeout=args.timeout, token=token) as c:
        cmd = args.command
        if cmd == "send":
            event = json.loads(read_source(args.json) if args.json == "-" else args.json)
            if not isinstance(event, dict):
                raise ValueError("the event must be a JSON object")
            dump(await c.send(event), out)
        elif cmd == "event":
            dump(await c.send(build_event(args)), out)
        elif cmd == "sessions":
            data = await c.list_sessions(args.state, args.limit, args.offset)
            dump(data, out) if args.json else print_sessions(dict(data), out)
        elif cmd == "map":
            chunk_map = await c.session_map(args.session_id)
            if args.json:
                dump(chunk_map, out)
            else:
                out.writelines(h + "\n" for h in chunk_map["chunk_hashes"])
        elif cmd == "trace":
            return await follow(c, args, out)
        elif cmd == "health":
            dump(await c.health(), out)
        elif cmd == "events":
            listed = dict(await c.list_events())
            dump(listed, out) if args.json else print_events(listed, out)
    return EXIT_OK


def main(argv: list[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``ramakv`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return asyncio.run(run(args, out or sys.stdout))
    except KeyboardInterrupt:
        return EXIT_OK if args.command == "trace" else 130
    except DaemonUnavailable as err:
        print(f"ramakv: {err.message}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except RamAKvError as err:
        where = f"{err.type}: " if err.type else ""
        print(f"ramakv: {where}{err.message}", file=sys.stderr)
        return EXIT_FAILED
    except (ValueError, OSError) as err:
        print(f"ramakv: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
