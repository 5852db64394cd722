"""Load generator (own process): concurrent sessions, one event at a time each, acked state kept.

Each session is driven by one worker that sends an event, waits for the answer and, when
the daemon acknowledged it, applies it to a local model of that session — so the model is
exactly what the daemon promised to keep. Events carry an ``event_id``, so an event whose
answer was lost can be resent safely.

Modes when the daemon stops answering (connection refused/reset, timeout):

- ``stop``: the worker records its unanswered event as ``pending`` and stops; the run
  ends when every worker stopped or a bound is hit (the kill-loop test).
- ``retry``: the worker resends the same event (same ``event_id``) until it is answered,
  as an SDK retry would (the soak).

Run: ``python tests/support/loadgen.py --url URL --out result.json [--state-in state.json]``;
it prints ``ready`` once a few events were acknowledged. Only stdlib + aiohttp.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WRITE_TYPES = (
    "turn_end",
    "session_fork",
    "session_fork_end",
    "session_suspend",
    "session_close",
    "snapshot_restore",
)


@dataclass
class SessionModel:
    """What the daemon must hold for one session after the acknowledged events."""

    chunk_hashes: list[str] = field(default_factory=list)
    turn_count: int = 0
    suspended: bool = False
    fork_holds: list[list[str]] = field(default_factory=list)
    closed: bool = False  # closed with open forks: they stay held until their fork_end


Model = dict[str, SessionModel]


def unique(hashes: list[str]) -> list[str]:
    """First occurrences, in order."""
    return list(dict.fromkeys(hashes))


def apply(model: Model, event: dict[str, Any]) -> bool:
    """Apply ``event`` to ``model`` as the daemon does; returns the expected ``ok``."""
    type_, sid = event["type"], event.get("session_id", "")
    s = model.get(sid)
    if type_ == "turn_end":
        s = s or SessionModel()
        hashes = event["kv_transfer_params"]["chunk_hashes"]
        model[sid] = SessionModel(list(hashes), s.turn_count + 1, False, s.fork_holds)
        return True
    if type_ == "session_fork":
        if s is None or s.closed or s.suspended or len(s.fork_holds) >= 64:
            return False
        s.fork_holds = [*s.fork_holds, unique(s.chunk_hashes)]
        return True
    if type_ == "session_fork_end":
        if s is None or not s.fork_holds:
            return False
        s.fork_holds = s.fork_holds[:-1]
        if s.closed and not s.fork_holds:
            del model[sid]
        return True
    if type_ == "session_suspend":
        if s is not None and not s.closed:
            s.suspended = True
        return True
    if type_ == "session_close":
        if s is not None and s.fork_holds:
            model[sid] = SessionModel(fork_holds=s.fork_holds, closed=True)
        else:
            model.pop(sid, None)
        return True
    if type_ in ("snapshot_restore", "session_map"):
        if s is None or s.closed:
            return type_ == "session_map" and s is None  # as before: never generated
        s.suspended = s.suspended and type_ == "session_map"
        return True
    return type_ in ("turn_start", "health")


def applied(model: Model, event: dict[str, Any]) -> Model:
    """A copy of ``model`` with ``event`` applied."""
    out = copy.deepcopy(model)
    apply(out, event)
    return out


def model_to_json(model: Model) -> dict[str, Any]:
    """JSON-ready form."""
    return {sid: asdict(s) for sid, s in sorted(model.items())}


def model_from_json(data: dict[str, Any]) -> Model:
    """Inverse of :func:`model_to_json`."""
    return {
        sid: SessionModel(
            list(v["chunk_hashes"]),
            int(v["turn_count"]),
            bool(v["suspended"]),
            [list(h) for h in v["fork_holds"]],
            bool(v.get("closed")),
        )
        for sid, v in data.items()
    }


def session_ids(n: int) -> list[str]:
    """The sessions a run drives (a few non-ASCII ids among them)."""
    return [f"s{i:03d}" if i % 5 else f"sess-ü-{i:03d}" for i in range(n)]


def hexed(name: str) -> str:
    """A stable hex chunk hash for ``name`` (LMCache's memory API accepts hex only)."""
    return hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


def next_event(
    rng: random.Random, sid: str, model: Model, counter: int, hex_hashes: bool = False
) -> dict[str, Any]:
    """A mostly-valid next event for ``sid`` (some are expected to fail; that is fine)."""
    s = model.get(sid)
    roll = rng.random()
    if s is None or roll < 0.42:
        prefix = [f"sys-{rng.randrange(3)}"]
        own = [f"{sid}-{counter - k}" for k in range(rng.randrange(0, 12))]
        shared = [f"g{rng.randrange(40)}" for _ in range(rng.randrange(0, 6))]
        hashes = prefix + shared + own
        if hex_hashes:
            hashes = [hexed(h) for h in hashes]
        if s is not None and rng.random() < 0.5:
            hashes = s.chunk_hashes[: rng.randrange(len(s.chunk_hashes) + 1)] + hashes
        return {
            "type": "turn_end",
            "session_id": sid,
            "kv_transfer_params": {"chunk_hashes": hashes[:60]},
        }
    choices = [
        ("session_fork", 0.12),
        ("session_fork_end", 0.12 if s.fork_holds else 0.02),
        ("session_suspend", 0.08),
        ("snapshot_restore", 0.08 if s.suspended else 0.02),
        ("session_close", 0.05),
        ("turn_start", 0.08),
        ("session_map", 0.05),
    ]
    total = sum(w for _, w in choices)
    pick = rng.random() * total
    for type_, w in choices:
        pick -= w
        if pick <= 0:
            return {"type": type_, "session_id": sid}
    return {"type": "turn_start", "session_id": sid}


@dataclass
class Run:
    """Shared counters of one load-generator run."""

    model: Model
    mode: str
    deadline: float
    max_events: int
    rate: float
    sent: int = 0
    acked: int = 0
    acked_writes: int = 0
    failed_expected: int = 0
    retries: int = 0
    mismatches: list[str] = field(default_factory=list)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    ready: bool = False
    next_slot: float = 0.0

    def more(self) -> bool:
        return self.sent < self.max_events and time.monotonic() < self.deadline

    async def pace(self) -> None:
        """Global steady rate (events per second over all sessions); 0 = as fast as possible."""
        if self.rate <= 0:
            return
        now = time.monotonic()
        self.next_slot = max(self.next_slot + 1.0 / self.rate, now)
        if self.next_slot > now:
            await asyncio.sleep(self.next_slot - now)


async def _send(http: Any, url: str, event: dict[str, Any], timeout: float) -> dict[str, Any]:
    import aiohttp

    async with http.post(
        f"{url}/event", json=event, timeout=aiohttp.ClientTimeout(total=timeout)
    ) as resp:
        body = await resp.json(content_type=None)
        if resp.status not in (200, 400):
            raise ConnectionError(f"HTTP {resp.status}: {body}")
        return body


async def worker(
    run: Run,
    http: Any,
    url: str,
    sid: str,
    seed: int,
    prefix: str,
    timeout: float,
    hex_hashes: bool = False,
) -> None:
    """Drive one session, one event at a time."""
    import aiohttp

    rng = random.Random(f"{seed}-{sid}")
    n = 0
    while run.more():
        n += 1
        event = next_event(rng, sid, run.model, n, hex_hashes)
        event["event_id"] = f"{prefix}-{sid}-{n}"
        await run.pace()
        run.sent += 1
        started = time.monotonic()
        while True:
            try:
                body = await _send(http, url, event, timeout)
                break
            except (aiohttp.ClientError, TimeoutError, ConnectionError, ValueError):
                if run.mode == "stop":
                    run.pending[sid] = event
                    return
                run.retries += 1
                if time.monotonic() > run.deadline + 60:
                    run.pending[sid] = event
                    return
                await asyncio.sleep(0.1)
        run.latencies.append(time.monotonic() - started)
        own = run.model.get(sid)
        expect = apply({sid: copy.deepcopy(own)} if own is not None else {}, event)
        if body.get("ok") is not expect:
            run.mismatches.append(f"{event} -> {body} (expected ok={expect})")
            return
        if not expect:
            run.failed_expected += 1
            continue
        if event["type"] == "session_map":
            want = run.model[sid].chunk_hashes if sid in run.model else None
            if body["data"]["chunk_hashes"] != want:
                run.mismatches.append(f"session_map {sid}: {body['data']} != {want}")
        apply(run.model, event)
        run.acked += 1
        if event["type"] in WRITE_TYPES:
            run.acked_writes += 1
        if not run.ready and run.acked >= 20:
            run.ready = True
            print("ready", flush=True)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    """Run the workers; returns the result document."""
    import aiohttp

    state = json.loads(Path(args.state_in).read_text()) if args.state_in else {}
    run = Run(
        model_from_json(state),
        args.mode,
        time.monotonic() + args.duration,
        args.max_events,
        args.rate,
    )
    started = time.monotonic()
    connector = aiohttp.TCPConnector(limit=args.sessions + 4)
    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(
            *(
                worker(run, http, args.url, sid, args.seed, args.prefix, args.timeout, args.hex)
                for sid in session_ids(args.sessions)
            )
        )
    lat = sorted(run.latencies) or [0.0]
    return {
        "sent": run.sent,
        "acked": run.acked,
        "acked_writes": run.acked_writes,
        "failed_expected": run.failed_expected,
        "retries": run.retries,
        "mismatches": run.mismatches[:20],
        "pending": run.pending,
        "model": model_to_json(run.model),
        "seconds": time.monotonic() - started,
        "p50_ms": lat[len(lat) // 2] * 1000,
        "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse flags, run, write the result JSON."""
    p = argparse.ArgumentParser(description="ram-a-kv load generator")
    p.add_argument("--url", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--state-in")
    p.add_argument("--sessions", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix", default="ev")
    p.add_argument("--mode", choices=("stop", "retry"), default="stop")
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--max-events", type=int, default=5000)
    p.add_argument("--rate", type=float, default=0.0, help="events/s over all sessions")
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--hex", action="store_true", help="hex chunk hashes (for LMCache)")
    args = p.parse_args(argv)
    result = asyncio.run(main_async(args))
    Path(args.out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
