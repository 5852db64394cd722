"""ramakv-admin's report: sessions per namespace and state, idle ages, chunks, budget, outbox."""

from __future__ import annotations

from collections import Counter
from typing import TextIO

from ramakv_daemon.admin_port import AdminView
from ramakv_daemon.config import Config
from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.deployments import DEFAULT_NAMESPACE

IDLE_BUCKETS = ((60, "<1m"), (600, "<10m"), (3600, "<1h"), (86400, "<1d"), (604800, "<7d"))


def report(view: AdminView, cfg: Config, now: float) -> JsonObject:
    """The report's JSON document (``owners`` only for a store several nodes share)."""
    configured = {DEFAULT_NAMESPACE: "default"}
    budgets = {DEFAULT_NAMESPACE: cfg.ddr_budget_chunks}
    for d in cfg.deployments:
        configured[d.key] = d.name
        budgets[d.key] = d.ddr_budget_chunks
    spaces: dict[str, JsonObject] = {}
    refs: dict[str, Counter[str]] = {}
    for s in view.sessions:
        row = spaces.setdefault(s.namespace, _empty_row(s.namespace, configured, budgets))
        row["sessions"][s.state] += 1
        row["idle"][_bucket(now - s.last_event_ts if s.last_event_ts else None)] += 1
        counts = refs.setdefault(s.namespace, Counter())
        counts.update(s.held_hashes())
        row["stored_chunks"].update(s.chunk_hashes)
    for f in view.forks:
        row = spaces.setdefault(f.namespace, _empty_row(f.namespace, configured, budgets))
        row["open_forks"] += 1
        refs.setdefault(f.namespace, Counter()).update(f.hashes)
    for e in view.outbox:
        row = spaces.setdefault(e.namespace, _empty_row(e.namespace, configured, budgets))
        row["outbox"][e.mode.value] += 1
    for ns, row in spaces.items():
        counts = refs.get(ns, Counter())
        row["chunks_referenced"] = len(counts)
        row["references"] = sum(counts.values())
        row["stored_chunks"] = len(row["stored_chunks"])
        budget = row["ddr_budget_chunks"]
        row["budget_use"] = round(len(counts) / budget, 3) if budget else None
        row["outbox"] = dict(row["outbox"])
    rep: JsonObject = {
        "namespaces": dict(sorted(spaces.items())),
        "unconfigured": sorted(ns for ns in spaces if ns not in configured),
        "sessions_total": len(view.sessions),
    }
    if view.owners is not None:
        rep["owners"] = dict(sorted(view.owners.items()))
    return rep


def _empty_row(ns: str, configured: dict[str, str], budgets: dict[str, int]) -> JsonObject:
    return {
        "deployment": configured.get(ns),
        "configured": ns in configured,
        "sessions": {"active": 0, "suspended": 0},
        "idle": dict.fromkeys([b for _, b in IDLE_BUCKETS] + [">=7d", "never"], 0),
        "stored_chunks": set(),
        "ddr_budget_chunks": budgets.get(ns, 0),
        "open_forks": 0,
        "outbox": Counter(),
    }


def _bucket(age: float | None) -> str:
    if age is None:
        return "never"
    for limit, name in IDLE_BUCKETS:
        if age < limit:
            return name
    return ">=7d"


def print_report(rep: JsonObject, out: TextIO) -> None:
    """The report as text."""
    if "owners" in rep:
        print(
            "sessions by owner node: "
            + (", ".join(f"{node} {n}" for node, n in rep["owners"].items()) or "none"),
            file=out,
        )
    print(f"sessions: {rep['sessions_total']}", file=out)
    for ns, row in rep["namespaces"].items():
        name = row["deployment"] or "NOT CONFIGURED"
        print(f"\nnamespace {ns or '(default)'}  [{name}]", file=out)
        print(
            f"  sessions: {row['sessions']['active']} active, "
            f"{row['sessions']['suspended']} suspended",
            file=out,
        )
        idle = ", ".join(f"{k} {v}" for k, v in row["idle"].items() if v)
        print(f"  idle age: {idle or '-'}", file=out)
        print(
            f"  chunks: {row['chunks_referenced']} referenced ({row['references']} "
            f"references), {row['stored_chunks']} in stored maps",
            file=out,
        )
        if row["ddr_budget_chunks"]:
            print(
                f"  DDR budget: {row['chunks_referenced']} / {row['ddr_budget_chunks']} "
                f"chunks referenced ({row['budget_use']:.0%})",
                file=out,
            )
        if row.get("open_forks"):
            print(f"  open forks: {row['open_forks']}", file=out)
        box = ", ".join(f"{m} {n}" for m, n in row["outbox"].items())
        print(f"  eviction outbox: {box or 'empty'}", file=out)
    if rep["unconfigured"]:
        print(
            "\nin the database but not configured (never deleted automatically; "
            "`ramakv-admin purge-namespace NS` to remove):",
            file=out,
        )
        for ns in rep["unconfigured"]:
            print(f"  {ns}", file=out)
