"""One console, headless under Pilot, against a daemon: when every session shows, how fast
keys are answered while events stream in, how far the header's seq lags behind the daemon
during the stream and how long it takes to catch up after it stops, peak RSS. Prints one
JSON line.

Talks to its parent on stdin: ``go`` (the stream is flowing), then ``stop T_END SEQ`` (the
stream ended at ``time.time()`` T_END with the daemon at SEQ).

Run as a file (``python bench/console_probe.py``) with PYTHONPATH naming the code to
measure, so that the same probe drives the old console (main) and the new one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from typing import Any


def peak_rss_mb() -> float:
    """VmHWM of this process, MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def wait(pilot: Any, cond: Any, timeout: float, every: float = 0.002) -> float | None:
    """Seconds until ``cond()`` held (polled every ``every`` s), or None after ``timeout``.

    Plain sleeps, not ``pilot.pause``: that waits for the app to be idle, which under a
    steady event stream adds its own delay to every measurement.
    """
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout:
            return None
        await asyncio.sleep(every)
    return time.perf_counter() - t0


SEQ_IN_HEADER = re.compile(r"\bseq (\d+)")


def header_seq(app: Any) -> int | None:
    """The seq the header shows (as drawn text: what an operator reads)."""
    try:
        text = str(app.screen.query_one("#stats").render())
    except Exception:  # a view without the header is showing (a key switched it)
        return None
    m = SEQ_IN_HEADER.search(text)
    return int(m.group(1)) if m else None


def oldest_after(app: Any, seq: int) -> dict[str, Any] | None:
    """The oldest event record the console holds after ``seq``."""
    found = None
    for rec in reversed(app.state.events):
        s = rec.get("seq")
        if isinstance(s, int):
            if s <= seq:
                break
            found = rec
    return found


def stamp_arrivals(app: Any) -> None:
    """Mark each record with when the console's link handed it over (``_rx``): the lag
    then splits into the daemon's and the wire's part (``ts`` to ``_rx``) and the
    console's own (``_rx`` to the header)."""
    trace = app.link.trace

    async def stamped() -> Any:
        async for rec in trace():
            rec["_rx"] = time.time()
            yield rec

    app.link.trace = stamped


async def sample_lag(
    app: Any,
    out: list[tuple[float, float, float]],
    shown_at: list[tuple[float, int]],
    every: float = 0.05,
) -> None:
    """Every ``every`` s (20 wake-ups a second, not a busy poll that would take the
    console's own CPU): when the header shows a newer seq, how long the oldest event it
    newly shows waited since the daemon handled it (``ts``; the daemon runs on this
    machine's clock). A console that falls behind shows nothing new until it catches up,
    and then records the whole wait; a stream that pauses adds nothing. ``shown_at``:
    (time, seq) each time the header showed a newer seq (for the catch-up)."""
    shown = header_seq(app) or 0
    while True:
        await asyncio.sleep(every)
        seq = header_seq(app)
        if seq is None or seq <= shown:  # nothing newer (or a view's header not yet redrawn)
            continue
        now = time.time()
        rec = oldest_after(app, shown)
        if rec is not None and rec.get("ts"):
            rx = float(rec.get("_rx") or rec["ts"])
            out.append((now, max(0.0, now - float(rec["ts"])), max(0.0, now - rx)))
        shown_at.append((now, seq))
        shown = seq


def press(app: Any, key: str) -> None:
    """The key as the terminal driver delivers it (no waiting for idle)."""
    from textual import events

    app.post_message(events.Key(key, key if len(key) == 1 else None))


async def probe(args: argparse.Namespace) -> dict[str, Any]:
    from ramakv_console.app import ConsoleApp
    from ramakv_console.widgets.session_table import SessionTable

    out: dict[str, Any] = {}
    app = ConsoleApp(args.url)
    stamp_arrivals(app)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.screen.query_one(SessionTable)

        def all_rows() -> bool:
            return table.row_count >= args.expect and not getattr(app.state, "loading", False)

        took = await wait(pilot, all_rows, args.timeout)
        out["all_sessions_s"] = None if took is None else time.time() - args.t0
        out["rows_seen"] = table.row_count
        out["banner"] = str(app.connection[1])[:200]
        print("READY", flush=True)
        sys.stdin.readline()  # the parent starts the event stream, then says go
        go_at = time.time()
        cpu_at_go = time.process_time()
        lags: list[tuple[float, float, float]] = []
        shown_at: list[tuple[float, int]] = []
        sampler = asyncio.create_task(sample_lag(app, lags, shown_at))
        await asyncio.sleep(args.settle)
        seq0 = app.state.seq
        lat: dict[str, list[float]] = {"down": [], "sort": [], "view": []}
        for _ in range(args.rounds):
            if type(app.screen).__name__ != "SessionsScreen":
                press(app, "1")
                await wait(pilot, lambda: type(app.screen).__name__ == "SessionsScreen", 10)
            table = app.screen.query_one(SessionTable)
            before = table.cursor_row
            t0 = time.perf_counter()
            press(app, "down")
            done = await wait(pilot, lambda t=table, b=before: t.cursor_row != b, 2.0)
            lat["down"].append(time.perf_counter() - t0 if done is not None else 2.0)
            sort_before = table.sort_key
            t0 = time.perf_counter()
            press(app, "o")
            done = await wait(pilot, lambda t=table, b=sort_before: t.sort_key != b, 5.0)
            lat["sort"].append(time.perf_counter() - t0 if done is not None else 5.0)
            for key, name in (("3", "TraceScreen"), ("1", "SessionsScreen")):
                t0 = time.perf_counter()
                press(app, key)
                done = await wait(pilot, lambda n=name: type(app.screen).__name__ == n, 5.0)
                await asyncio.sleep(0.1)  # as a person would: the view shown, then a key
                lat["view"].append(done if done is not None else 5.0)
            await asyncio.sleep(0.2)
        every = [x for v in lat.values() for x in v]
        out["key_ms"] = {k: round(statistics.median(v) * 1000, 1) for k, v in lat.items()}
        out["key_all_ms"] = {k: [round(x * 1000, 1) for x in v] for k, v in lat.items()}
        out["key_max_ms"] = round(max(every) * 1000, 1)
        out["key_median_ms"] = round(statistics.median(every) * 1000, 1)
        out["events_seen"] = app.state.seq - seq0
        keys_done = time.time()
        # The stream runs on after the keys; the parent says when it ended and where.
        stop = (await asyncio.to_thread(sys.stdin.readline)).split()
        t_end, final_seq = float(stop[1]), int(stop[2])
        # The console's own demand, whatever the machine's load: CPU seconds it used per
        # second of the stream (its keys and the probe's sampling included).
        out["console_cpu_pct"] = round(
            100 * (time.process_time() - cpu_at_go) / max(time.time() - go_at, 1e-9), 1
        )
        during = [lag for at, lag, _ in lags if at <= t_end]
        own = [lag for at, _, lag in lags if at <= t_end]
        out["lag_max_s"] = round(max(during), 3) if during else None
        out["lag_median_s"] = round(statistics.median(during), 3) if during else None
        # The five worst, with when they were seen (s after the stream started): next to
        # the key phase's times they say whether a key's work or the machine held it up.
        out["lag_worst"] = [
            (round(at - go_at, 2), round(lag, 3), round(mine, 3))
            for at, lag, mine in sorted(lags, key=lambda x: -x[1])[:5]
            if at <= t_end
        ]
        out["keys_done_at_s"] = round(keys_done - go_at, 2)
        # The console's own part: from the record's arrival to the header showing it.
        out["console_lag_max_s"] = round(max(own), 3) if own else None
        # Caught up when the header first showed the daemon's last seq: the sampler saw it
        # (maybe before the parent's word came, which takes it a moment to send).
        await wait(pilot, lambda: bool(shown_at) and shown_at[-1][1] >= final_seq, args.timeout)
        sampler.cancel()
        first = next((at for at, seq in shown_at if seq >= final_seq), None)
        out["catch_up_s"] = None if first is None else round(max(0.0, first - t_end), 3)
        out["final_seq"] = final_seq
        out["header"] = str(app.screen.query_one("#stats").render())[:200]
    out["peak_rss_mb"] = round(peak_rss_mb(), 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--expect", type=int, required=True)
    p.add_argument("--t0", type=float, required=True, help="time.time() at spawn")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--settle", type=float, default=2.0)
    p.add_argument("--profile", help="write cProfile stats of the run to this file")
    args = p.parse_args()
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
        res = asyncio.run(probe(args))
        prof.disable()
        prof.dump_stats(args.profile)
    else:
        res = asyncio.run(probe(args))
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
