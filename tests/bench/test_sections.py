"""bench.sections: a benchmark's run replaces its results section whole and says its load."""

from __future__ import annotations

from typing import Any

from bench import sections


def _record(results: dict[str, Any], name: str, res: dict[str, Any], load: float) -> None:
    sections.record(
        results,
        name,
        res,
        started="2026-12-06T02:00:00Z",
        loadavg_start=(load, 1.0, 1.0),
        loadavg_end=(load + 1, 1.0, 1.0),
        cpus=2,
        wall_s=3.14159,
    )


def test_a_run_replaces_its_section_whole_and_leaves_the_others() -> None:
    results: dict[str, Any] = {
        "engine": {"ttft_reduction": 0.0196, "calibration": {"old": 1}, "started": "old"},
        "throughput": {"ratio": 0.3},
    }
    _record(results, "engine", {"ttft_mean_reduction": 0.54, "calibration": {"new": 2}}, 0.5)
    engine = results["engine"]
    assert "ttft_reduction" not in engine  # the older run's key is gone, not merged
    assert engine["calibration"] == {"new": 2}
    assert engine["ttft_mean_reduction"] == 0.54
    assert engine["started"] == "2026-12-06T02:00:00Z"
    assert engine["loadavg_start"] == [0.5, 1.0, 1.0]
    assert engine["loadavg_end"] == [1.5, 1.0, 1.0]
    assert (engine["cpus"], engine["wall_s"], engine["under_load"]) == (2, 3.1, False)
    assert results["throughput"] == {"ratio": 0.3}


def test_a_start_load_over_the_core_count_marks_the_section_under_load() -> None:
    results: dict[str, Any] = {}
    _record(results, "throughput", {"ratio": 0.3}, 15.0)
    _record(results, "sdk", {"p50": 1}, 2.0)  # exactly the core count: not over it
    assert results["throughput"]["under_load"] is True
    assert results["sdk"]["under_load"] is False
    md = sections.render_md(results, {"throughput": "T", "sdk": "S"}, ["throughput", "sdk"])
    head, _, rest = md.partition("## throughput")
    tp, _, sdk = rest.partition("## sdk")
    assert "measured under load" in tp and "load 15.0 on 2 CPUs" in tp
    assert "measured under load" not in sdk and "load 2.0 on 2 CPUs" in sdk


def test_the_markdown_reads_back_to_the_tables_alone() -> None:
    results: dict[str, Any] = {"old": {"x": 1}}
    _record(results, "new", {"x": 2}, 9.0)
    texts = {"old": "| a |\n|---|", "new": "| b |\n|---|"}
    md = sections.render_md(results, texts, ["old", "new"])
    assert "unknown start and load" in md  # a section from before sections carried them
    assert sections.parse_md(md) == texts


def test_sections_a_command_line_recorded_follow_the_suites() -> None:
    """A run one benchmark's own command line recorded (bench.idle_restart --record NAME)
    is rendered too, after the suite's sections, in name order."""
    results: dict[str, Any] = {}
    for name in ("suite", "run_b", "run_a"):
        _record(results, name, {"x": 1}, 1.0)
    texts = {"run_b": "| b |", "suite": "| s |", "run_a": "| a |"}
    md = sections.render_md(results, texts, ["suite"])
    assert [line for line in md.splitlines() if line.startswith("## ")] == [
        "## suite",
        "## run_a",
        "## run_b",
    ]
    assert sections.parse_md(md) == texts


def test_a_command_line_run_replaces_its_section_and_keeps_the_rest(tmp_path: Any) -> None:
    """bench.idle_restart --record NAME: latest.{json,md} keep every other section, in order."""
    for name, x in (("first", 1), ("second", 2), ("first", 3)):
        sections.save_run(
            tmp_path,
            name,
            {"x": x},
            f"| {name} {x} |",
            started="2026-12-06T02:00:00Z",
            loadavg_start=(0.5, 0.5, 0.5),
            wall_s=1.0,
        )
    import json

    results = json.loads((tmp_path / "latest.json").read_text())
    assert results["first"]["x"] == 3 and results["second"]["x"] == 2
    md = (tmp_path / "latest.md").read_text()
    assert sections.parse_md(md) == {"first": "| first 3 |", "second": "| second 2 |"}
