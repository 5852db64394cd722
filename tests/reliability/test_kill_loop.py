"""kill -9 under concurrent load from another process: every acknowledged change survives."""

from __future__ import annotations

import copy
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.daemon_proc import DaemonProcess
from support.loadgen import Model, applied, apply, model_from_json
from support.reliability import (
    db_model,
    db_outbox,
    diff,
    finish,
    live_state,
    model_refcounts,
    run_loadgen,
    wait_for,
    wait_ready,
)

KILLS = int(os.environ.get("RAMAKV_KILLS", "5"))
SESSIONS = 12


def check_after_kill(store: Path, acked: Model, pending: dict[str, dict[str, Any]]) -> None:
    """The file holds every acknowledged change; an unanswered event is all there or absent."""
    stored = db_model(store)
    for sid in sorted(set(stored) | set(acked) | set(pending)):
        options = [acked.get(sid)]
        if sid in pending:
            options.append(applied(acked, pending[sid]).get(sid))
        assert stored.get(sid) in options, (
            f"{sid}: stored {stored.get(sid)} is neither acked {options[0]} nor "
            f"acked+pending {options[1:]} (pending {pending.get(sid)})"
        )


def resend_pending(d: DaemonProcess, model: Model, pending: dict[str, dict[str, Any]]) -> Model:
    """Resend every unanswered event with its event_id: applied exactly once either way."""
    for _, event in sorted(pending.items()):
        model = copy.deepcopy(model)
        expect_ok = apply(model, event)
        status, body = d.post(event)
        assert status == 200 and body["ok"] is expect_ok, (event, body)
    return model


def check_live(d: DaemonProcess, model: Model) -> None:
    """Memory, file and model agree; refcounts equal the ones recomputed from the maps."""
    live, refcounts = live_state(d.url)
    stored = db_model(d.store)
    assert not diff(live, model), diff(live, model)
    assert not diff(stored, model), diff(stored, model)
    assert refcounts == model_refcounts(stored)


def test_kill_loop_keeps_every_acknowledged_change(
    daemon_proc_factory: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    rng = random.Random(int(os.environ.get("RAMAKV_KILL_SEED", time.time_ns() % 10**6)))
    d = daemon_proc_factory()
    model: Model = {}
    acked = acked_writes = sent = resent = 0
    for round_ in range(KILLS):
        gen = run_loadgen(d.url, tmp_path, model, round_)
        wait_ready(gen)
        time.sleep(rng.uniform(0.05, 1.2))  # a random moment in the burst
        d.kill()
        result = finish(gen, tmp_path, round_)
        assert result["mismatches"] == [], result["mismatches"]
        acked += result["acked"]
        acked_writes += result["acked_writes"]
        sent += result["sent"]
        acked_model = model_from_json(result["model"])
        pending = result["pending"]
        check_after_kill(d.store, acked_model, pending)
        d.start()
        model = resend_pending(d, acked_model, pending)
        resent += len(pending)
        check_live(d, model)
    # After the last restart: outbox drained by the (noop) backend, nothing referenced in it.
    assert wait_for(lambda: not db_outbox(d.store), 120), db_outbox(d.store)
    print(
        f"\nkill loop: {KILLS} kills survived; {sent} events sent, {acked} acknowledged "
        f"({acked_writes} writes) and all found after restart; {resent} unanswered events "
        f"resent by event_id; {len(model)} sessions, {len(model_refcounts(model))} chunks"
    )
