"""The `ramakv` command against a real daemon: output, exit codes, config."""

from __future__ import annotations

import json
import re
from pathlib import Path


def test_health_and_events(daemon_proc, ramakv) -> None:
    r = ramakv("--url", daemon_proc.url, "health")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"status": "running", "sessions_count": 0}
    r = ramakv("--url", daemon_proc.url, "events", "--json")
    assert "turn_end" in json.loads(r.stdout)["events"]
    assert "chunk_info" in json.loads(r.stdout)["admin_events"]
    lines = ramakv("--url", daemon_proc.url, "events").stdout.splitlines()
    assert lines[0] == "contract events (9):"
    assert "  session_fork_end  session_id [fork_id]" in lines
    admin = lines.index(next(x for x in lines if x.startswith("admin events (")))
    assert admin == 10 and "  list_events" in lines[admin + 1 :]


def test_event_map_and_sessions(daemon_proc, ramakv) -> None:
    u = ("--url", daemon_proc.url)
    r = ramakv(*u, "event", "turn_end", "--session", "s1", "--hashes=-1a,2b,3c")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["map_updated"] is True
    r = ramakv(*u, "map", "s1")
    assert r.stdout.splitlines() == ["-1a", "2b", "3c"]
    assert json.loads(ramakv(*u, "map", "s1", "--json").stdout)["chunk_hashes"][0] == "-1a"
    ramakv(*u, "event", "session_suspend", "-s", "s1")
    r = ramakv(*u, "sessions")
    lines = r.stdout.splitlines()
    assert lines[0].split() == [
        "SESSION",
        "STATE",
        "TURNS",
        "CHUNKS",
        "OPEN",
        "FORKS",
        "LAST",
        "EVENT",
    ]
    assert lines[1].split()[:4] == ["s1", "suspended", "1", "3"]
    assert lines[-1] == "1 of 1 sessions"
    data = json.loads(ramakv(*u, "sessions", "--state", "active", "--json").stdout)
    assert data == {"total": 0, "sessions": []}


def test_turn_end_needs_a_list(daemon_proc, ramakv) -> None:
    u = ("--url", daemon_proc.url)
    ramakv(*u, "event", "turn_end", "-s", "s", "--hashes", "aa,bb")
    r = ramakv(*u, "event", "turn_end", "-s", "s")
    assert r.returncode == 2 and "turn_end needs --hashes" in r.stderr
    assert ramakv(*u, "map", "s").stdout.split() == ["aa", "bb"]
    r = ramakv(*u, "send", '{"type": "turn_end", "session_id": "s", "kv_transfer_params": {}}')
    assert r.returncode == 1
    assert "missing required field 'kv_transfer_params.chunk_hashes'" in r.stderr
    r = ramakv(*u, "event", "turn_end", "-s", "s", "--hashes=")  # an explicit empty map
    assert json.loads(r.stdout)["evicted_count"] == 2


def test_forks_by_id(daemon_proc, ramakv) -> None:
    u = ("--url", daemon_proc.url)
    ramakv(*u, "event", "turn_end", "-s", "p", "--hashes", "aa")
    ids = [
        json.loads(ramakv(*u, "event", "session_fork", "-s", "p").stdout)["fork_id"]
        for _ in range(2)
    ]
    assert ids == [1, 2]
    ramakv(*u, "event", "session_close", "-s", "p")
    lines = ramakv(*u, "sessions", "--state", "closed").stdout.splitlines()
    assert lines[1].split()[:4] == ["p", "closed", "0", "0"]
    assert re.search(r"#1 \d+[smhd], #2 \d+[smhd]", lines[1]), lines[1]
    r = ramakv(*u, "event", "session_fork_end", "-s", "p", "--fork-id", "1")
    assert json.loads(r.stdout) == {"fork_end": True, "fork_id": 1}
    r = ramakv(*u, "event", "session_fork_end", "-s", "p", "--fork-id", "1")
    assert json.loads(r.stdout) == {"fork_end": False, "fork_id": 1}


def test_hashes_file_and_chunk_events(daemon_proc, ramakv, tmp_path: Path) -> None:
    u = ("--url", daemon_proc.url)
    f = tmp_path / "hashes.txt"
    f.write_text("-1a\n2b\n\n3c\n")
    assert ramakv(*u, "event", "turn_end", "-s", "a", "--hashes-file", str(f)).returncode == 0
    r = ramakv(*u, "event", "chunk_info", "--hashes-file", "-", stdin="2b 3c")
    assert json.loads(r.stdout)["chunks"]["2b"] == {"refcount": 1, "holders": ["a"]}
    r = ramakv(*u, "event", "chunk_evict", "--hashes", "2b", "--dry-run")
    assert json.loads(r.stdout)["refused"] == {"2b": ["a"]}
    r = ramakv(*u, "event", "snapshot_restore", "-s", "b", "--source", "a")
    assert json.loads(r.stdout) == {"prefetch_sent": True, "prefetch_count": 3}
    r = ramakv(*u, "event", "list_sessions", "--set", "limit=1", "--set", "state=active")
    assert len(json.loads(r.stdout)["sessions"]) == 1


def test_send_raw_json(daemon_proc, ramakv) -> None:
    u = ("--url", daemon_proc.url)
    r = ramakv(*u, "send", '{"type": "turn_start", "session_id": "x"}')
    assert r.returncode == 0 and json.loads(r.stdout)["prefetch_count"] == 0
    r = ramakv(*u, "send", "-", stdin='{"type": "health"}')
    assert json.loads(r.stdout)["status"] == "running"


def test_ok_false_exits_1_with_the_error_on_stderr(daemon_proc, ramakv) -> None:
    u = ("--url", daemon_proc.url)
    r = ramakv(*u, "map", "nobody")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr.strip() == "ramakv: session_map: session 'nobody' not found"
    r = ramakv(*u, "send", '{"type": "nope"}')
    assert r.returncode == 1 and "unknown event type" in r.stderr
    r = ramakv(*u, "send", '{"type": "turn_end", "session_id": "s"}')
    assert r.returncode == 1 and "missing required field 'kv_transfer_params'" in r.stderr


def test_usage_errors_exit_2(daemon_proc, ramakv) -> None:
    u = ("--url", daemon_proc.url)
    assert ramakv(*u, "send", "{not json").returncode == 2
    assert ramakv(*u, "send", "[1]").returncode == 2
    r = ramakv(*u, "event", "chunk_info", "--hashes", "-1a")  # needs --hashes=-1a
    assert r.returncode == 2 and "expected one argument" in r.stderr
    assert ramakv(*u, "event", "health", "--set", "novalue").returncode == 2
    assert ramakv(*u).returncode == 2


def test_unreachable_daemon_exits_3(ramakv) -> None:
    from support.daemon_proc import free_port

    r = ramakv("--url", f"http://127.0.0.1:{free_port()}", "--timeout", "1", "health")
    assert r.returncode == 3 and "cannot reach ram-a-kv daemon" in r.stderr


def test_trace_since_and_count(daemon_proc, ramakv) -> None:
    u = ("--url", daemon_proc.url)
    ramakv(*u, "event", "turn_end", "-s", "t", "--hashes", "aa")
    ramakv(*u, "event", "turn_start", "-s", "t")
    r = ramakv(*u, "trace", "--since", "0", "--session", "t", "--count", "2", "--json")
    msgs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [m["type"] for m in msgs] == ["turn_end", "turn_start"]
    assert msgs[1]["seq"] == msgs[0]["seq"] + 1
    r = ramakv(*u, "trace", "--since", "0", "--session", "t", "--count", "1")
    assert r.stdout.startswith(f"#{msgs[0]['seq']} ")
    assert " turn_end t ok evicted_count=0 map_updated=True" in r.stdout


def test_url_from_the_sdk_config(daemon_proc, ramakv, tmp_path: Path) -> None:
    cfg = tmp_path / "xdg" / "ram-a-kv" / "config.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f'daemon_url = "{daemon_proc.url}"\n')
    r = ramakv("health")
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "running"


def test_console_script_exit_codes(daemon_proc, ramakv_script) -> None:
    r = ramakv_script("--url", daemon_proc.url, "event", "turn_end", "-s", "p", "--hashes=-9")
    assert r.returncode == 0, r.stderr
    assert ramakv_script("--url", daemon_proc.url, "map", "p").stdout == "-9\n"
    r = ramakv_script("--url", daemon_proc.url, "map", "nobody")
    assert r.returncode == 1 and r.stderr == "ramakv: session_map: session 'nobody' not found\n"


def test_trace_with_a_wrong_token_says_so(daemon_proc_factory, ramakv) -> None:
    d = daemon_proc_factory(config={"auth_token": "s3cret"})
    r = ramakv("--url", d.url, "--token", "wrong", "trace", "--count", "1")
    assert r.returncode != 0
    assert "HTTP 401" in r.stderr and "auth token" in r.stderr
    r = ramakv("--url", d.url, "--token", "s3cret", "trace", "--since", "0", "--count", "1")
    assert r.returncode == 0, r.stderr
