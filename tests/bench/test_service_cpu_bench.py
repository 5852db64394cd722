"""bench.service_cpu --suspend on a short run: every session is suspended and its cold
order delivered before the figure is taken (counts only; the figures are the benchmark's)."""

import asyncio

from bench import service_cpu


def test_suspend_mode_measures_every_suspend_to_an_empty_outbox() -> None:
    res = asyncio.run(service_cpu.measure_suspend(40))
    assert res["events"] == 40
    assert res["cpu_us_per_suspend"] > 0
