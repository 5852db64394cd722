"""The run-end grace adapts to runs that never come back (issue 31, workload (b)): a final
answer with no return within the horizon counts as a run end that needed no grace. A
manual clock drives the timers; the daemon is real, the engine the stand-in."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from test_lifecycle import chat, state
from test_run_end import run_to_final_answer

from ramakv_proxy import ManualClock
from ramakv_proxy.grace import HORIZON_S, MIN_S


async def proxy_numbers(proxy) -> tuple[dict, str]:  # noqa: ANN001
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{proxy.url}/_ramakv/stats") as r:
            life = (await r.json())["lifecycle"]
        async with http.get(f"{proxy.url}/_ramakv/metrics") as r:
            return life, await r.text()


async def test_finished_runs_that_never_return_shrink_the_grace_to_its_floor(
    daemon_proc, engine, start_proxy
) -> None:
    """Before: no session came back, so the grace never left its 5 s start and every
    finished run's chunks stayed warm 5 s longer than needed."""
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=5)
    life = proxy.lifecycle
    for sid in ("done-1", "done-2", "done-3"):
        await run_to_final_answer(proxy, sid)
    clock.advance(HORIZON_S - 0.01)
    assert await proxy.sender.flush(120)
    assert life.grace.seconds == 5.0 and life.stats.run_end_no_returns == 0
    clock.advance(0.01)
    assert await proxy.sender.flush(120)
    assert life.stats.run_end_no_returns == 3 and life.grace.seconds == MIN_S
    numbers, text = await proxy_numbers(proxy)
    assert numbers["run_end_no_returns"] == 3 and numbers["run_end_grace_s"] == MIN_S
    assert "ramakv_proxy_run_end_no_returns_total 3.0" in text
    assert f"ramakv_proxy_run_end_grace_seconds {MIN_S}" in text
    # The next finished run is suspended at the floor, not at the start value.
    await run_to_final_answer(proxy, "done-4")
    clock.advance(MIN_S)
    assert await proxy.sender.flush(120)
    assert state(daemon_proc, "done-4") == "suspended"
    # A session back after the horizon: a misprediction, but not a second observation.
    observed = life.grace.observed
    final = await run_to_final_answer(proxy, "late")
    clock.advance(HORIZON_S + 30)
    assert life.stats.run_end_no_returns == 5 and life.grace.observed == observed + 2
    await chat(proxy, final, "late")
    assert life.stats.run_end_mispredictions == 1 and life.grace.observed == observed + 2


async def test_with_every_run_back_the_grace_is_the_return_gaps_quantile(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=clock, run_end_grace_s=5)
    life = proxy.lifecycle
    finals = {sid: await run_to_final_answer(proxy, sid) for sid in "abcd"}
    for sid, wait in (("a", 2.0), ("b", 1.0), ("c", 1.0), ("d", 5.0)):
        clock.advance(wait)  # gaps 2, 3, 4 (inside the grace) and 9 (after the suspend)
        await chat(proxy, finals[sid], sid)
    assert life.stats.run_end_cancelled == 3 and life.stats.run_end_mispredictions == 1
    # sorted [2, 3, 4, 9]: index int(0.9 * 4) = 3, as before non-returns counted
    assert life.grace.seconds == 9.0 and life.grace.observed == 4
    clock.advance(HORIZON_S - 9 + 1)  # the first final answers' horizons: all returned
    assert await proxy.sender.flush(120)
    assert life.stats.run_end_no_returns == 0 and life.grace.seconds == 9.0
    numbers, text = await proxy_numbers(proxy)
    assert numbers["run_end_no_returns"] == 0 and numbers["run_end_grace_s"] == 9.0
    assert "ramakv_proxy_run_end_no_returns_total 0.0" in text


async def test_a_session_closed_idle_before_the_horizon_did_not_come_back(
    daemon_proc, engine, start_proxy
) -> None:
    clock = ManualClock()
    proxy = await start_proxy(
        engine.url, daemon_proc.url, clock=clock, run_end_grace_s=5, session_idle_close_s=30
    )
    await run_to_final_answer(proxy, "gone")
    clock.advance(30)
    assert await proxy.sender.flush(120)
    st = proxy.lifecycle.stats
    assert (st.closes_idle, st.run_end_no_returns) == (1, 1)
    assert proxy.lifecycle.grace.seconds == MIN_S and proxy.lifecycle.sessions == 0
    assert clock.pending == 0  # the horizon went with the session


async def test_a_pending_horizon_survives_a_proxy_restart(
    daemon_proc, engine, start_proxy, tmp_path: Path
) -> None:
    state_file = str(tmp_path / "pending-8001.json")
    first = await start_proxy(
        engine.url, daemon_proc.url, clock=ManualClock(), state_file=state_file
    )
    await run_to_final_answer(first, "finished")
    assert await first.sender.flush(120)
    await first.runner.cleanup()
    clock = ManualClock()
    second = await start_proxy(engine.url, daemon_proc.url, clock=clock, state_file=state_file)
    assert second.lifecycle.state_of("finished") == "run_end"
    clock.advance(HORIZON_S)
    assert await second.sender.flush(120)
    assert second.lifecycle.stats.run_end_no_returns == 1
    assert second.lifecycle.grace.seconds == MIN_S
