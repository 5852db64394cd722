"""never_worse --topology: each topology's steering, the stock server's L1 size and command
line, the workloads each runs and the results file (no engine started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_ext_dev.tiny_engine import EngineProcess, EngineSettings
from bench import never_worse, nw_results, nw_topology
from bench.engine_workload import Shape
from bench.stock_stack import MPServer, StockEngine, server_args


def _settings(tmp_path: Path) -> EngineSettings:
    return EngineSettings(work_dir=tmp_path, port=20001, api_port_start=20002)


def test_the_stock_side_steers_the_server_through_lmcache_mp_and_a_stock_proxy(
    tmp_path: Path,
) -> None:
    server = MPServer(5555, "http://127.0.0.1:8080", tmp_path / "l2", tmp_path / "log")
    engine = StockEngine(_settings(tmp_path), 5555, server)
    config, flags = nw_topology.steering(engine)
    assert 'backend = "lmcache_mp"\n' in config
    assert 'lmcache_url = "http://127.0.0.1:8080"\n' in config
    assert f'model_name = "{tmp_path / "model"}"\n' in config  # vLLM's --model string
    assert flags == ["--lmcache-mp-url", "http://127.0.0.1:8080"]


def test_a_stock_engine_without_its_server_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="without its server"):
        nw_topology.steering(StockEngine(_settings(tmp_path), 5555))


def test_the_in_process_side_steers_the_memory_api_with_the_default_proxy(
    tmp_path: Path,
) -> None:
    config, flags = nw_topology.steering(EngineProcess(_settings(tmp_path)))
    assert config == 'lmcache_url = "http://127.0.0.1:20002"\n' and flags == []


def test_the_stock_l1_is_the_in_process_ddr_tier() -> None:
    shape = Shape(ddr_chunks=20)
    assert nw_topology.l1_gb(shape) == 20 * shape.chunk_mib / 1024
    small = server_args(1, 2, Path("/l2"), l1_gb=nw_topology.l1_gb(shape))
    assert "--no-l1-use-lazy" in small and "--l1-init-size-gb" not in small
    size = float(small[small.index("--l1-size-gb") + 1])
    assert int(size * (1 << 30)) == 20 * int(shape.chunk_mib) << 20
    # the tests' server keeps the issue's command line
    default = server_args(1, 2, Path("/l2"))
    assert default[default.index("--l1-size-gb") :][:4] == [
        "--l1-size-gb",
        "1",
        "--l1-init-size-gb",
        "1",
    ]


def test_the_engine_benchmark_does_not_run_on_the_stock_topology() -> None:
    assert nw_topology.WORKLOADS["stock"] == ("a", "b", "c")
    with pytest.raises(ValueError, match=r"\['d'\] do not run on the stock topology"):
        never_worse.run(quick=True, only=("a", "d"), topology="stock")


def test_a_run_is_written_as_one_section_with_its_start_and_load_ahead_of_earlier_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nw_results, "RESULTS", tmp_path)
    (tmp_path / "never_worse-stock-quick.md").write_text("# never worse (old)\n\nold table\n")
    res = {"topology": "stock", "quick": True, "loadavg_start": (0.5, 0, 0)}
    res |= {"loadavg_end": (3.0, 0, 0), "a": {"never_worse": True}}
    path = nw_results.write_results(res, "the table", "2026-12-06T05:00:00Z", 61.0)
    assert path == tmp_path / "never_worse-stock-quick"
    res2 = {**res, "b": {"never_worse": False}}
    del res2["a"]
    nw_results.write_results(res2, "table two", "2026-12-06T06:00:00Z", 5.0)
    md = (tmp_path / "never_worse-stock-quick.md").read_text()
    assert md.index("## 2026-12-06T06:00:00Z: b\n\n_run 2026-12-06T06:00:00Z, load 0.5 on") < (
        md.index("## 2026-12-06T05:00:00Z: a\n\n_run 2026-12-06T05:00:00Z")
    )
    assert "the table\n" in md and "table two\n" in md
    assert md.endswith("## never worse (old)\n\nold table\n")
    runs = json.loads((tmp_path / "never_worse-stock-quick.json").read_text())["runs"]
    assert [r["started"] for r in runs] == ["2026-12-06T06:00:00Z", "2026-12-06T05:00:00Z"]
    assert runs[1]["wall_s"] == 61.0 and runs[1]["a"] == {"never_worse": True}
    assert runs[1]["topology"] == "stock"
    res["topology"] = "ascend_ext"
    assert nw_results.write_results(res, "t", "x", 1.0).name == "never_worse-quick"
