"""bench.startup on a small store: each figure is there and the probe's events all answered
(counts, never timings: the figures are the benchmark's, in bench/results)."""

from __future__ import annotations

from pathlib import Path

from bench import startup


def test_a_small_store_runs_every_part(tmp_path: Path) -> None:
    res = startup.large_case(200, seconds=2.0, rate=50.0, store_dir=tmp_path)
    assert res["sessions"] == 200 and res["references"] == 200 * 512
    assert res["stored_as"] == "codes"
    assert res["events"] > 0 and res["windows"]
    assert res["rss_listening_mib"] > 0 and res["peak_rss_mib"] >= res["rss_listening_mib"]
    old = startup.large_case(200, seconds=2.0, rate=50.0, store_dir=tmp_path, codes=False)
    assert old["stored_as"] == "json only" and old["events"] > 0
    where = startup.where_bytes_go(200, store_dir=tmp_path)
    # Every map packs (engine-spelled hashes): 8 bytes a reference, 12 a distinct chunk.
    assert where["references"] == 200 * 512 and where["maps_b_per_ref"] == 8.0
    assert where["table_mib"] * 2**20 == (64 + 200 * 448) * 12
    text = startup.table({"empty": startup.empty_case(1), "sizes": [res, old], "bytes": where})
    assert "| 200 | codes |" in text and "| 200 | json only |" in text
    assert "bare aiohttp server" in text and "Where the bytes go at 200 x 512" in text
