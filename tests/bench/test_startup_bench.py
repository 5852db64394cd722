"""bench.startup on a small store: each figure is there and the probe's events all answered
(counts, never timings: the figures are the benchmark's, in bench/results)."""

from __future__ import annotations

from pathlib import Path

from bench import startup


def test_a_small_store_runs_every_part(tmp_path: Path) -> None:
    res = startup.large_case(200, seconds=2.0, rate=50.0, store_dir=tmp_path)
    assert res["sessions"] == 200 and res["references"] == 200 * 512
    assert res["events"] > 0 and res["windows"]
    assert res["rss_listening_mib"] > 0 and res["peak_rss_mib"] >= res["rss_listening_mib"]
    text = startup.table({"empty": startup.empty_case(1), "sizes": [res]})
    assert "| 200 |" in text and "bare aiohttp server" in text
