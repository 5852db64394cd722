"""Pure parts of the console: state mirror, event form building, config files, themes."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ramakv_console import config_io
from ramakv_console.event_fields import build_event, form_fields
from ramakv_console.state import ConsoleState
from ramakv_console.themes import load_themes, parse_theme

REPO = Path(__file__).resolve().parents[2]


def ev(seq: int, sessions: dict, refcounts: dict, sid: str = "s", totals=None) -> dict:
    rec = {
        "kind": "event",
        "seq": seq,
        "ts": 1.0,
        "type": "turn_end",
        "session_id": sid,
        "ok": True,
        "data": {},
        "delta": {"sessions": sessions, "refcounts": refcounts},
    }
    if totals is not None:
        rec["totals"] = totals
    return rec


def row(sid: str, chunks: int, state: str = "active", shared: int = 0, holds: int = 0) -> dict:
    return {
        "session_id": sid,
        "state": state,
        "turn_count": 1,
        "chunk_count": chunks,
        "shared_count": shared,
        "fork_holds": holds,
        "last_event_ts": 1.0,
    }


def snapshot(seq: int, rows: list[dict], parts: int = 1) -> list[dict]:
    out: list[dict] = [
        {
            "kind": "snapshot",
            "seq": seq,
            "totals": {"sessions": len(rows), "chunks": 2, "references": 2},
        }
    ]
    size = max(1, -(-len(rows) // parts))
    chunks = [rows[i : i + size] for i in range(0, len(rows), size)] or [[]]
    for k, part in enumerate(chunks):
        out.append(
            {
                "kind": "snapshot_sessions",
                "seq": seq,
                "part": k,
                "last": k == len(chunks) - 1,
                "refcounts": {},
                "sessions": part,
            }
        )
    return out


def test_state_follows_summaries_and_totals() -> None:
    st = ConsoleState()
    ch = st.apply(snapshot(3, [row("a", 2), row("b", 1, "suspended")], parts=2))
    assert ch.reset and set(st.sessions) == {"a", "b"} and st.suspended == 1
    assert not st.loading and st.seq == 3
    ch = st.apply(
        [
            ev(
                4,
                {"c": row("c", 2, shared=1)},
                {"x": 2, "z": 1},
                "c",
                {"sessions": 3, "chunks": 3, "references": 4},
            )
        ]
    )
    assert ch.sessions == {"c"} and ch.chunks == {"x": 2, "z": 1}
    assert st.shared_count("c") == 1 and st.references() == 4 and st.chunk_total() == 3
    st.apply([ev(5, {"b": row("b", 1)}, {}, "b")])
    assert st.suspended == 0
    st.apply([ev(6, {"a": None}, {"y": 0}, "a")])
    assert "a" not in st.sessions and [e["seq"] for e in st.session_events("a")] == [6]


def test_a_snapshot_in_parts_is_loading_until_the_last() -> None:
    st = ConsoleState()
    msgs = snapshot(1, [row(f"s{i}", 1) for i in range(10)], parts=3)
    st.apply(msgs[:2])
    assert st.loading and len(st.sessions) < 10
    st.apply(msgs[2:])
    assert not st.loading and len(st.sessions) == 10


def test_a_burst_keeps_every_change_but_only_the_newest_events() -> None:
    st = ConsoleState()
    st.apply(snapshot(0, []))
    ch = st.apply(
        [ev(i, {f"s{i}": row(f"s{i}", 1)}, {}, f"s{i}") for i in range(1, 1001)], keep_last=100
    )
    assert len(st.sessions) == 1000 and st.seq == 1000
    assert len(ch.events) == 100 and ch.dropped_events == 900
    assert ch.events[0]["seq"] == 901


def test_toml_diff_and_url_validation() -> None:
    assert config_io.Diff("noop_backend", None, True, True).line() == (
        "noop_backend: (unset) -> true  [restart needed]"
    )
    assert config_io.Diff("lmcache_url", "http://a:1", "http://b:2", False).line() == (
        'lmcache_url: "http://a:1" -> "http://b:2"'
    )
    spec = next(s for s in config_io.DAEMON_FIELDS if s.name == "lmcache_url")
    for bad in (
        "http://localhost:6999XYZ",
        "http://localhost:70000",
        "http://:80",
        "ftp://x",
        "http://a b",
    ):
        with pytest.raises(ValueError, match="lmcache_url"):
            config_io.parse_value(spec, bad)
    assert config_io.parse_value(spec, "https://lmcache:6999") == "https://lmcache:6999"


def test_open_forks_by_id_with_their_age_outlive_the_parent() -> None:
    now = [1000.0]
    st = ConsoleState(clock=lambda: now[0])
    fork = {"fork_id": 7, "session_id": "p", "created_ts": 700.0, "chunk_count": 1}
    snap = snapshot(1, [{**row("p", 1, holds=1), "forks": [fork]}])
    st.apply(snap)
    assert st.fork_ages("p") == "#7 5m"
    later = {"fork_id": 9, "session_id": "p", "created_ts": 990.0, "chunk_count": 1}
    rec = ev(2, {"p": None}, {"x": 2}, "p")  # the parent closes; its forks stay
    rec["delta"]["forks"] = {"9": later}
    ch = st.apply([rec])
    assert "p" in ch.sessions and "p" not in st.sessions
    assert [f["fork_id"] for f in st.forks_of("p")] == [7, 9]
    now[0] = 1010.0
    assert st.fork_ages("p") == "#7 5m, #9 20s"
    end = ev(3, {}, {"x": 1}, "p")
    end["delta"]["forks"] = {"7": None}
    assert "p" in st.apply([end]).sessions  # the parent's detail must redraw
    assert st.fork_ages("p") == "#9 20s" and st.fork_ages("q") == "-"


def test_fork_id_is_a_number_in_the_form() -> None:
    fields = form_fields({"required": ["session_id"], "optional": ["fork_id"]})
    assert build_event("session_fork_end", fields, {"session_id": "p", "fork_id": " 3 "}) == {
        "type": "session_fork_end",
        "session_id": "p",
        "fork_id": 3,
    }
    assert build_event("session_fork_end", fields, {"session_id": "p", "fork_id": ""}) == {
        "type": "session_fork_end",
        "session_id": "p",
    }
    with pytest.raises(ValueError, match="fork_id must be a whole number"):
        build_event("session_fork_end", fields, {"session_id": "p", "fork_id": "x"})


def test_build_event_from_form() -> None:
    fields = form_fields(
        {"required": ["session_id", "kv_transfer_params"], "optional": ["debug_context"]}
    )
    event = build_event(
        "turn_end",
        fields,
        {"session_id": " s1 ", "kv_transfer_params": "h1\n\n h2 \n", "debug_context": ""},
    )
    assert event == {
        "type": "turn_end",
        "session_id": "s1",
        "kv_transfer_params": {"chunk_hashes": ["h1", "h2"]},
    }
    with pytest.raises(ValueError, match="debug_context: invalid JSON"):
        build_event(
            "turn_end",
            fields,
            {"session_id": "s", "kv_transfer_params": "h", "debug_context": "{nope"},
        )
    with pytest.raises(ValueError, match="session_id is required"):
        build_event("turn_end", fields, {"kv_transfer_params": "h"})
    evict = form_fields({"required": ["chunk_hashes"], "optional": ["dry_run", "force"]})
    assert build_event("chunk_evict", evict, {"chunk_hashes": "a\nb", "dry_run": True}) == {
        "type": "chunk_evict",
        "chunk_hashes": ["a", "b"],
        "dry_run": True,
    }


def test_config_round_trip_keeps_unknown_keys_not_comments(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        '# operator note\nlisten_addr = "127.0.0.1:7000"\nfuture_key = 5\n[extra]\nx = "y"\n'
    )
    original = config_io.load(path)
    edits = {s.name: s.default for s in config_io.DAEMON_FIELDS}
    edits["listen_addr"] = "127.0.0.1:7001"
    merged, diffs = config_io.merge(original, edits, config_io.DAEMON_FIELDS)
    assert [d.key for d in diffs] == ["listen_addr"] and diffs[0].needs_restart
    backup = config_io.write_atomic(path, merged)
    assert backup is not None and "operator note" in backup.read_text()
    data = tomllib.loads(path.read_text())
    assert data == {"listen_addr": "127.0.0.1:7001", "future_key": 5, "extra": {"x": "y"}}
    assert "operator note" not in path.read_text()  # tomli-w: comments do not survive
    assert config_io.COMMENTS_SURVIVE is False


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("listen_addr", "nohost"),
        ("lmcache_url", "ftp://x"),
        ("trace_queue", "-1"),
        ("backend_timeout_s", "soon"),
        ("debug_enabled", "maybe"),
    ],
)
def test_config_validation(name: str, text: str) -> None:
    spec = next(s for s in config_io.DAEMON_FIELDS if s.name == name)
    with pytest.raises(ValueError, match=name):
        config_io.parse_value(spec, text)


def test_config_fields_match_the_daemon_dataclass() -> None:
    """The editor must offer every daemon key (read from the source, never imported)."""
    import ast

    tree = ast.parse((REPO / "ramakv_daemon" / "config.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config")
    keys = {
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert keys == {s.name for s in config_io.DAEMON_FIELDS} | config_io.KEPT_AS_IS


def test_deployments_tables_survive_an_edit(tmp_path: Path) -> None:
    """[[deployments]] is not in the form; saving any edit keeps it exactly."""
    path = tmp_path / "config.toml"
    path.write_text(
        'listen_addr = "127.0.0.1:6998"\n\n[[deployments]]\nname = "qwen"\n'
        'namespace = "kvp-0123"\nlmcache_url = "http://127.0.0.1:7001"\n'
    )
    spec = {s.name: s for s in config_io.DAEMON_FIELDS}
    edits = {
        "ddr_budget_chunks": config_io.parse_value(spec["ddr_budget_chunks"], "512"),
        "evict_locations": config_io.parse_value(
            spec["evict_locations"], "LocalCPUBackend, LocalDiskBackend"
        ),
    }
    merged, diffs = config_io.merge(config_io.load(path), edits, config_io.DAEMON_FIELDS)
    config_io.write_atomic(path, merged)
    again = config_io.load(path)
    assert again["deployments"] == [
        {"name": "qwen", "namespace": "kvp-0123", "lmcache_url": "http://127.0.0.1:7001"}
    ]
    assert again["ddr_budget_chunks"] == 512
    assert again["evict_locations"] == ["LocalCPUBackend", "LocalDiskBackend"]
    assert {d.key for d in diffs} == {"ddr_budget_chunks", "evict_locations"}


def test_shipped_themes_parse_and_one_is_light() -> None:
    themes, problems = load_themes([REPO / "themes"])
    assert not problems and len(themes) >= 3
    assert any(not t.dark for t in themes)


def test_broken_theme_is_reported(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('name = "bad"\nprimary = "not-a-colour"\n')
    (tmp_path / "worse.toml").write_text("name = [\n")
    themes, problems = load_themes([tmp_path])
    assert themes == [] and {p.path.name for p in problems} == {"bad.toml", "worse.toml"}
    with pytest.raises(ValueError, match="bad colour"):
        parse_theme(tmp_path / "bad.toml")


def test_console_never_imports_the_daemon() -> None:
    """Statically and at run time: ramakv_console talks to the daemon only via ramakv_sdk."""
    import ast

    for path in (REPO / "ramakv_console").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] == "ramakv_daemon" for n in names), path
    code = (
        "import sys, ramakv_console.app, ramakv_console.__main__; "
        "bad = [m for m in sys.modules if m.startswith('ramakv_daemon')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_session_view_keeps_the_namespace() -> None:
    from ramakv_console.state import SessionView

    named = SessionView.from_dict("a", {"state": "active", "namespace": "kvp-0123abcd"})
    plain = SessionView.from_dict("b", {"state": "suspended"})
    assert named.namespace == "kvp-0123abcd" and plain.namespace == ""


def test_a_closed_parents_forks_come_in_the_snapshot_parts() -> None:
    st = ConsoleState(clock=lambda: 1000.0)
    fork = {"fork_id": 3, "session_id": "gone", "created_ts": 940.0, "chunk_count": 2}
    snap = snapshot(1, [row("a", 1)])
    snap[-1]["forks"] = [fork]
    ch = st.apply(snap)
    assert "gone" in ch.sessions and "gone" not in st.sessions
    assert st.fork_ages("gone") == "#3 1m"
