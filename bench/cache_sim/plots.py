"""PNG plots of the suite's result: hit rate and modelled TTFT vs capacity, vs L, per variant."""

from __future__ import annotations

import os
from typing import Any

from bench.cache_sim.policy import LRU, STEERED


def write_plots(result: dict[str, Any], out_dir: str) -> list[str]:
    """Write cache_vs_capacity.png, cache_vs_lead.png, cache_variants.png; returns paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    os.makedirs(out_dir, exist_ok=True)
    grid = [r for r in result["runs"] if r["tag"] == "grid"]
    lru = sorted((r for r in grid if r["policy"] == LRU.name), key=lambda r: r["capacity"])
    steered = [r for r in grid if r["policy"] == STEERED.name]
    paths = []

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    caps = [r["capacity"] * 100 for r in lru]
    ax1.plot(caps, [r["hit_rate"] * 100 for r in lru], "o-", label=LRU.name, color="grey")
    ax2.plot(caps, [r["ttft_mean_ms"] for r in lru], "o-", label=LRU.name, color="grey")
    for lead, style in ((1.0, "s-"), (0.2, "^--"), (0.0, "v:")):
        rs = sorted((r for r in steered if r["lead_s"] == lead), key=lambda r: r["capacity"])
        if len(rs) < 2:
            continue
        label = f"steered ({STEERED.name}), L={lead:g}s"
        ax1.plot(
            [r["capacity"] * 100 for r in rs], [r["hit_rate"] * 100 for r in rs], style, label=label
        )
        ax2.plot(
            [r["capacity"] * 100 for r in rs], [r["ttft_mean_ms"] for r in rs], style, label=label
        )
    ax1.set(
        xlabel="DDR capacity (% of peak working set)",
        ylabel="DDR hit rate (% of reused)",
        title="Hit rate vs capacity",
        ylim=(0, 100),
    )
    ax2.set(
        xlabel="DDR capacity (% of peak working set)",
        ylabel="modelled mean TTFT (ms)",
        title="Modelled TTFT vs capacity",
    )
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{result['requests']} requests, 128 sessions ({result['command']})", fontsize=9)
    fig.tight_layout()
    paths.append(_save(fig, out_dir, "cache_vs_capacity.png"))
    plt.close(fig)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for cap, color in ((0.10, "tab:red"), (0.25, "tab:blue"), (0.50, "tab:green")):
        rs = sorted((r for r in steered if r["capacity"] == cap), key=lambda r: r["lead_s"])
        base = next((r for r in lru if r["capacity"] == cap), None)
        if len(rs) >= 2:
            leads = [r["lead_s"] for r in rs]
            ax1.plot(
                leads,
                [r["hit_rate"] * 100 for r in rs],
                "o-",
                color=color,
                label=f"steered C={cap:.0%}",
            )
            ax2.plot(
                leads,
                [r["ttft_mean_ms"] for r in rs],
                "o-",
                color=color,
                label=f"steered C={cap:.0%}",
            )
            if base is not None:
                ax1.axhline(
                    base["hit_rate"] * 100,
                    color=color,
                    ls="--",
                    lw=1,
                    label=f"LRU alone C={cap:.0%}",
                )
                ax2.axhline(
                    base["ttft_mean_ms"], color=color, ls="--", lw=1, label=f"LRU alone C={cap:.0%}"
                )
    ax1.set(
        xlabel="prefetch lead time L (s)",
        ylabel="DDR hit rate (% of reused)",
        title="Hit rate vs lead time",
        ylim=(0, 100),
    )
    ax2.set(
        xlabel="prefetch lead time L (s)",
        ylabel="modelled mean TTFT (ms)",
        title="Modelled TTFT vs lead time",
    )
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(_save(fig, out_dir, "cache_vs_lead.png"))
    plt.close(fig)

    variants = result.get("variants", {})
    if variants:
        names = list(variants)
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
        ys = range(len(names))
        ax1.barh(ys, [variants[n]["slow_path_gain"] for n in names], color="tab:blue")
        ax1.axvline(2.5, color="red", ls="--", lw=1, label="target 2.5x")
        ax1.set(
            yticks=list(ys),
            yticklabels=names,
            xlabel="slow-path gain (LRU / steered)",
            title="C=25%, L=1 s: critical-path SSD loads + recomputes",
        )
        ax1.set_xscale("log")
        ax2.barh(ys, [variants[n]["ttft_reduction"] * 100 for n in names], color="tab:orange")
        ax2.axvline(40, color="red", ls="--", lw=1, label="target 40%")
        ax2.set(
            yticks=list(ys),
            yticklabels=[""] * len(names),
            xlabel="mean TTFT reduction vs LRU (%)",
            title="modelled mean TTFT",
        )
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3, axis="x")
            ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(_save(fig, out_dir, "cache_variants.png"))
        plt.close(fig)
    return paths


def _save(fig: Any, out_dir: str, name: str) -> str:
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=110)
    return path
