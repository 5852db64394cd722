"""bench.nw_workload, the never-worse benchmark's pure parts: seeded workloads, vLLM's
counters, the proxy's stats read by name, ratios against the targets (no engine)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from bench import nw_workload as nw

WORDS = [f"w{i}" for i in range(50)]


def _workload(seed: int = 31, scale: float = 1.0) -> tuple[str, list[nw.UserScript]]:
    return nw.chat_workload(replace(nw.ChatShape(), seed=seed), nw.word_text(WORDS), scale)


def test_the_same_seed_gives_the_same_workload() -> None:
    assert _workload(7) == _workload(7)


def test_another_seed_gives_other_texts_and_user_names() -> None:
    (sys_a, users_a), (sys_b, users_b) = _workload(7), _workload(8)
    assert sys_a != sys_b
    assert {u.user for u in users_a}.isdisjoint({u.user for u in users_b})
    assert users_a[0].context != users_b[0].context


def test_the_workload_has_the_shape_issue_31_names() -> None:
    shape = nw.ChatShape()
    system, users = _workload()
    assert len(users) == shape.users == 8
    assert len(system.split()) == shape.system_tokens * 33 // 40
    for u in users:
        assert 3 <= len(u.messages) <= 5
        assert 0 <= u.start_s <= shape.start_spread_s
        for m in u.messages:
            assert 3.0 <= m.tool_s <= 10.0
            assert 2.0 <= m.think_s <= 15.0
            assert m.text and m.tool_result


def test_the_time_scale_scales_every_pause_and_nothing_else() -> None:
    (sys1, full), (sys2, half) = _workload(scale=1.0), _workload(scale=0.5)
    assert sys1 == sys2
    for a, b in zip(full, half, strict=True):
        assert (a.user, a.context) == (b.user, b.context)
        assert b.start_s == pytest.approx(a.start_s / 2, abs=1e-3)
        for ma, mb in zip(a.messages, b.messages, strict=True):
            assert ma.text == mb.text
            assert mb.tool_s == pytest.approx(ma.tool_s / 2, abs=1e-3)
            assert mb.think_s == pytest.approx(ma.think_s / 2, abs=1e-3)


def test_a_time_scale_of_zero_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        _workload(scale=0)


def test_the_quick_shape_is_smaller_and_its_ddr_below_its_working_set() -> None:
    quick, full = nw.quick_chat_shape(), nw.ChatShape()
    assert quick.users < full.users and quick.context_tokens < full.context_tokens
    per_user = (quick.context_tokens + quick.messages[1] * 200) // 256
    assert quick.ddr_chunks < quick.system_tokens // 256 + quick.users * per_user


def test_word_text_is_deterministic_for_its_rng() -> None:
    text = nw.word_text(WORDS)
    assert text(random.Random(1), 100) == text(random.Random(1), 100)
    assert len(text(random.Random(1), 100).split()) == 82


VLLM_032 = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 5000.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 1800.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 0.0
vllm:prompt_tokens_by_source_total{model_name="tiny",source="external_kv_transfer"} 3200.0
vllm:prompt_tokens_cached_total{engine="0",model_name="tiny"} 3200.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 0.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="tiny"} 3200.0
"""


def test_recomputed_tokens_come_from_vllms_local_compute_counter() -> None:
    assert nw.vllm_prompt_counters(VLLM_032) == {
        "prompt": 5000.0,
        "recomputed": 1800.0,
        "cached": 3200.0,
    }


def test_without_the_by_source_counter_cached_tokens_are_subtracted() -> None:
    older = "\n".join(x for x in VLLM_032.splitlines() if "by_source" not in x)
    assert nw.vllm_prompt_counters(older)["recomputed"] == 1800.0
    oldest = "\n".join(x for x in older.splitlines() if "prompt_tokens_cached" not in x)
    assert nw.vllm_prompt_counters(oldest)["recomputed"] == 1800.0


def test_counter_deltas_are_per_run() -> None:
    before = {"prompt": 100.0, "recomputed": 40.0}
    after = {"prompt": 350.0, "recomputed": 90.0, "failed_to_allocate": 2.0}
    assert nw.counter_delta(before, after) == {
        "prompt": 250.0,
        "recomputed": 50.0,
        "failed_to_allocate": 2.0,
    }


def test_parse_prometheus_reads_labels_with_escapes_and_skips_junk() -> None:
    text = 'a_total{x="q\\"uote",y="2"} 3\n# comment\nnot a sample line !\nb 1.5e3\nc{} NaNx\n'
    assert nw.parse_prometheus(text) == [
        ("a_total", {"x": 'q\\"uote', "y": "2"}, 3.0),
        ("b", {}, 1500.0),
    ]


def test_failed_allocations_are_counted_in_lmcache_log() -> None:
    log = "x\n[lmcache] WARNING Failed to allocate memory for 1 chunk\nFailed to allocate\nok\n"
    assert nw.failed_allocs(log) == 2
    stock = "LMCache WARNING: Failed to batched allocate 7 memory blocks of size 4194304 because"
    assert nw.failed_allocs(f"{log}{stock} no enough memory\n") == 3


BEFORE_31 = {"pending": 0, "lifecycle": {"suspends": 3, "closes_run_end": 4, "sessions": 2}}
AFTER_31 = {
    "pending": 0,
    "lifecycle": {"suspends": 3, "suspends_run_end": 4, "run_end_mispredictions": 2},
}


def test_stats_are_read_by_name_before_and_after_the_rename() -> None:
    assert nw.first_stat(BEFORE_31, "suspends_run_end") is None
    assert nw.first_stat(BEFORE_31, "closes_run_end") == 4.0
    assert nw.first_stat(AFTER_31, "suspends_run_end") == 4.0
    assert nw.first_stat({"suspends": True}, "suspends") is None  # a flag is no count


def test_every_misprediction_counter_is_found_by_its_path() -> None:
    assert nw.find_stats(BEFORE_31, "mispredict") == {}
    nested = {**AFTER_31, "x": {"y": {"branch_mispredictions": 1}}}
    assert nw.find_stats(nested, "mispredict") == {
        "lifecycle.run_end_mispredictions": 2.0,
        "x.y.branch_mispredictions": 1.0,
    }
    metrics = "ramakv_proxy_run_end_mispredictions_total 5\nramakv_proxy_suspends 1\n"
    assert nw.prom_lines_with(metrics, "mispredict") == {
        "ramakv_proxy_run_end_mispredictions_total": 5.0
    }


def test_percentile_and_latency_summary() -> None:
    ms = [float(x) for x in range(1, 11)]
    assert nw.percentile(ms, 0.9) == 9.0
    assert nw.latency_summary(ms) == {"calls": 10, "latency_mean_ms": 5.5, "latency_p90_ms": 9.0}
    assert nw.latency_summary([]) == {"calls": 0, "latency_mean_ms": 0.0, "latency_p90_ms": 0.0}


def _side(recomputed: int, mean: float, p90: float) -> dict[str, float]:
    return {"recomputed_tokens": recomputed, "latency_mean_ms": mean, "latency_p90_ms": p90}


def test_never_worse_holds_at_the_targets_exactly() -> None:
    v = nw.verdict(_side(1000, 100.0, 200.0), _side(1000, 105.0, 210.0))
    assert v["ratios"] == {"recomputed": 1.0, "latency_mean": 1.05, "latency_p90": 1.05}
    assert v["never_worse"] is True


def test_any_ratio_over_its_target_is_worse() -> None:
    v = nw.verdict(_side(1000, 100.0, 200.0), _side(1001, 90.0, 150.0))
    assert v["met"] == {"recomputed": False, "latency_mean": True, "latency_p90": True}
    assert v["never_worse"] is False
    v = nw.verdict(_side(1000, 100.0, 200.0), _side(900, 100.0, 211.0))
    assert v["met"]["latency_p90"] is False and v["never_worse"] is False


def test_the_aim_on_the_chat_pattern_is_alone_over_steered() -> None:
    v = nw.verdict(_side(3000, 1.0, 1.0), _side(2000, 1.0, 1.0), aim_gain=1.5)
    assert v["recompute_gain"] == 1.5 and v["aim_met"] is True
    v = nw.verdict(_side(3000, 1.0, 1.0), _side(2100, 1.0, 1.0), aim_gain=1.5)
    assert v["aim_met"] is False and v["never_worse"] is True
    assert "aim_gain" not in nw.verdict(_side(1, 1.0, 1.0), _side(1, 1.0, 1.0))


def test_ratios_of_zero() -> None:
    assert nw.ratio(0, 0) == 1.0
    assert nw.ratio(5, 0) is None
    v = nw.verdict(_side(0, 1.0, 1.0), _side(0, 1.0, 1.0), aim_gain=1.5)
    assert v["never_worse"] is True and v["aim_met"] is False
    assert nw.verdict(_side(0, 1.0, 1.0), _side(5, 1.0, 1.0))["met"]["recomputed"] is False


def test_runs_of_one_side_are_pooled() -> None:
    runs = [
        {
            "prompt_tokens": 10,
            "recomputed_tokens": 4,
            "cached_tokens": 6,
            "failed_to_allocate": 1,
            "latencies_ms": [1.0, 3.0],
            "mispredictions": {"lifecycle.run_end_mispredictions": 1.0},
        },
        {
            "prompt_tokens": 20,
            "recomputed_tokens": 5,
            "cached_tokens": 15,
            "failed_to_allocate": 0,
            "latencies_ms": [5.0],
            "mispredictions": {"lifecycle.run_end_mispredictions": 2.0},
        },
    ]
    pooled = nw.mean_side(runs)
    assert pooled["runs"] == 2 and pooled["calls"] == 3
    assert (pooled["prompt_tokens"], pooled["recomputed_tokens"]) == (30, 9)
    assert pooled["failed_to_allocate"] == 1 and pooled["latency_mean_ms"] == 3.0
    assert pooled["mispredictions"] == {"lifecycle.run_end_mispredictions": 3.0}


def test_the_kept_gains_of_b_and_d_need_both_latencies_under_their_aim() -> None:
    v = nw.verdict(_side(3000, 100.0, 200.0), _side(1000, 70.0, 140.0), 2.5, 0.7)
    assert v["aim_met"] is True and v["aim_latency_met"] is True
    v = nw.verdict(_side(3000, 100.0, 200.0), _side(1000, 70.0, 141.0), 2.5, 0.7)
    assert v["aim_latency_met"] is False and v["never_worse"] is True


def test_the_table_renders_pooled_runs_and_the_engine_benchmarks_form() -> None:
    from bench import never_worse, nw_results

    def run(side: str, recomputed: int, closes: float | None) -> dict[str, object]:
        return {
            "side": side,
            "prompt_tokens": 100,
            "recomputed_tokens": recomputed,
            "cached_tokens": 100 - recomputed,
            "failed_to_allocate": 3,
            "latencies_ms": [10.0, 20.0],
            "mispredictions": {},
            "closes_run_end": closes,
            "suspends_run_end": None if closes else 4.0,
        }

    chat = never_worse.side_by_side(
        {"alone": [run("alone", 40, 2.0)], "steered": [run("steered", 20, None)]},
        nw.AIM_RECOMPUTE_GAIN,
    )
    engine_form = {"recomputed_tokens": 10, "prompt_tokens": 50, "failed_to_allocate": 0}
    engine_form |= {"calls": 5, "latency_mean_ms": 1.0, "latency_p90_ms": 2.0}
    d = {"alone": engine_form, "steered": engine_form}
    d |= nw.verdict(engine_form, engine_form, nw.KEEP_GAIN, nw.KEEP_LATENCY)
    res = {"quick": True, "pairs": 1, "time_scale": 1.0, "loadavg_start": (1.0, 0, 0)}
    res |= {"loadavg_end": (2.0, 0, 0), "a": chat, "d": {**d, "engine_bench": {}}}
    text = nw_results.table(res)
    assert (
        "| (a) Agents SDK chat pattern | alone | 40 | 100 | 15.0 / 10.0 | 2 | 3 | 0 / 2 |" in text
    )
    assert "| (a) Agents SDK chat pattern | steered | 20 |" in text and "| 4 / 0 |" in text
    assert "gain 2.0 (aim >= 1.5: True)" in text
    assert "(d) engine benchmark: steered/alone recomputed 1.0x" in text
    assert "latency aim <= 0.7x: False" in text
