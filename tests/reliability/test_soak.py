"""Soak (``make soak``): steady mixed load, kills and backend faults; invariant and flat RSS."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.daemon_proc import DaemonProcess
from support.loadgen import model_from_json
from support.reliability import (
    FakeLMCacheProcess,
    db_model,
    db_outbox,
    diff,
    finish,
    live_state,
    metric,
    model_refcounts,
    rss_kib,
    run_loadgen,
    wait_for,
    wait_ready,
)

SECONDS = float(os.environ.get("RAMAKV_SOAK_SECONDS", "600"))
RATE = float(os.environ.get("RAMAKV_SOAK_RATE", "200"))
SESSIONS = int(os.environ.get("RAMAKV_SOAK_SESSIONS", "64"))
KILLS = int(os.environ.get("RAMAKV_SOAK_KILLS", str(max(2, int(SECONDS // 60)))))
FAULTS = ("503", "500", "slow", "malformed", "refused")


@pytest.mark.soak
@pytest.mark.timeout(SECONDS + 600)
def test_soak(daemon_proc_factory: Callable[..., DaemonProcess], tmp_path: Path) -> None:
    fake = FakeLMCacheProcess(tmp_path).start()
    d = daemon_proc_factory(
        start=False,
        config={"lmcache_url": fake.url, "backend_timeout_s": 0.5},
        extra_args=["--log-level", "WARNING"],
        noop=False,
    )
    fakes = [fake]
    gens: list[subprocess.Popen[str]] = []
    try:
        _soak(d, fakes, gens, tmp_path)
    finally:
        for g in gens:
            if g.poll() is None:
                g.kill()
        for f in fakes:
            f.kill()


def _soak(
    d: DaemonProcess,
    fakes: list[FakeLMCacheProcess],
    gens: list[subprocess.Popen[str]],
    tmp_path: Path,
) -> None:
    """The soak itself; the processes it starts are appended to ``fakes`` and ``gens``."""
    fake = fakes[0]
    d.start()
    gen = run_loadgen(
        d.url,
        tmp_path,
        {},
        0,
        mode="retry",
        duration=SECONDS,
        max_events=10**9,
        rate=RATE,
        sessions=SESSIONS,
        hex_hashes=True,
    )
    gens.append(gen)
    wait_ready(gen)

    t0 = time.monotonic()
    calm_from = t0 + SECONDS * 0.7  # last 30 %: no kills, RSS must stay flat
    kill_at = [t0 + SECONDS * 0.7 * (i + 1) / (KILLS + 1) for i in range(KILLS)]
    fault_every = max(10.0, SECONDS / 12)
    next_fault, fault_i, fault_end, refused = t0 + fault_every / 2, 0, 0.0, False
    samples: list[tuple[float, int, int]] = []  # (t, start no., rss KiB)
    backlog_max = 0.0
    kills = faults = 0
    downtimes: list[float] = []
    next_sample = t0
    while gen.poll() is None:
        now = time.monotonic()
        if kill_at and now >= kill_at[0]:
            kill_at.pop(0)
            d.kill()
            time.sleep(0.3)
            d.start()
            # Every event in flight or sent meanwhile waits out this downtime (the load
            # generator retries): with two kills in a short soak they exceed 1 % of the
            # events, so p99 is about the downtime (docs/reliability.md, "Soak").
            downtimes.append(time.monotonic() - now)
            kills += 1
        if fault_end and now >= fault_end:
            if refused:
                fake = FakeLMCacheProcess(tmp_path, fake.port).start()
                fakes.append(fake)
                refused = False
            else:
                fake.fail(None)
            fault_end = 0.0
        if not fault_end and now >= next_fault and now < t0 + SECONDS - 15:
            mode = FAULTS[fault_i % len(FAULTS)]
            fault_i += 1
            faults += 1
            if mode == "refused":
                fake.kill()
                refused = True
            else:
                fake.fail(mode, delay=2.0 if mode == "slow" else 0.0)
            fault_end, next_fault = now + min(8.0, fault_every / 2), now + fault_every
        if now >= next_sample and d.running():
            next_sample = now + 5
            try:
                samples.append((now - t0, d.starts, rss_kib(d.proc.pid)))  # type: ignore[union-attr]
                backlog_max = max(backlog_max, metric(d.url, "ramakv_evict_outbox"))
            except (OSError, FileNotFoundError):
                pass
        time.sleep(0.05)
    result = finish(gen, tmp_path, 0)
    rss_end = rss_kib(d.proc.pid)  # type: ignore[union-attr]
    if refused:
        fake = FakeLMCacheProcess(tmp_path, fake.port).start()
        fakes.append(fake)
    fake.fail(None)

    assert result["mismatches"] == [], result["mismatches"]
    assert result["pending"] == {}, result["pending"]
    model = model_from_json(result["model"])
    live, refcounts = live_state(d.url)
    assert not diff(live, model), diff(live, model)
    assert not diff(db_model(d.store), model), diff(db_model(d.store), model)
    assert refcounts == model_refcounts(model)
    # Outbox drains once the backend is healthy (a restart skips the backoff wait).
    d.stop()
    d.start()
    assert wait_for(lambda: not db_outbox(d.store), 30), len(db_outbox(d.store))
    live, refcounts = live_state(d.url)
    assert not diff(live, model) and refcounts == model_refcounts(model)

    # The "before" sample waits until the trace ring buffer (trace_buffer records) has
    # refilled after the last restart, so a filling buffer is not taken for a leak.
    settle = max(10.0, min(60.0, (t0 + SECONDS - calm_from) / 3))
    calm = [s for s in samples if s[0] >= (calm_from - t0) + settle and s[1] == d.starts - 1]
    timeline = " ".join(f"{t:.0f}s:{kib // 1024}M" for t, _, kib in samples[::6])
    first = [s for s in samples if s[0] >= 10]
    rss_calm = calm[0][2] if calm else rss_end
    rate = result["acked"] / result["seconds"]
    held = re.findall(r"(\d+) commits waited for the cache's answer .*?longest ([\d.]+) s", d.log())
    released = sum(int(n) for n, _ in held)
    longest = max((float(t) for _, t in held), default=0.0)
    print(
        f"\nsoak: {SECONDS:.0f}s, {SESSIONS} sessions, target {RATE:.0f} ev/s; "
        f"{result['sent']} events sent, {result['acked']} acknowledged "
        f"({result['acked_writes']} writes, {result['failed_expected']} expected ok:false), "
        f"achieved {rate:.1f} ev/s, p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
        f"{result['retries']} client retries; {kills} kills, {faults} backend faults, "
        f"outbox max {backlog_max:.0f}; final {len(model)} sessions, {len(refcounts)} chunks; "
        f"RSS first-warm {first[0][2] if first else 0} KiB, calm-phase start {rss_calm} KiB, "
        f"end {rss_end} KiB; downtime per kill (kill, 0.3 s, restart until healthy) "
        f"{', '.join(f'{t * 1000:.0f}' for t in downtimes) or '-'} ms, "
        f"load average {os.getloadavg()[0]:.1f}; {released} commits held until an evict's "
        f"deadline (a keep unanswered: the cache down or hung), longest {longest:.2f} s"
        f"\nRSS timeline (restarts reset it): {timeline}"
    )
    # Flat: the calm phase (no kills, steady load) grows by less than 25 % (+8 MiB slack).
    assert rss_end <= rss_calm * 1.25 + 8192, (rss_calm, rss_end, samples)
