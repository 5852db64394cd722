"""ramakv-admin l2-report / l2-cleanup: the stock server's fs L2 folder against the stored
sessions; dry runs change nothing; --yes deletes only dead chunks (through the server)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
from pathlib import Path

import pytest
import tomli_w
from support.lmcache_mp_server import FakeLMCacheMPServer
from support.ns_rig import Rig

from ramakv_daemon.adapters.backends.lmcache_fs_l2 import file_name
from ramakv_daemon.adapters.backends.lmcache_mp import kv_rank
from ramakv_daemon.cli.admin import main
from ramakv_daemon.config import load

MODEL = "org/model-7b"
RANK = kv_rank(1, 0)


def put(folder: Path, h: str, mtime: float, model: str = MODEL) -> None:
    path = folder / file_name(model, RANK, h)
    path.write_bytes(b"\0" * 100)
    os.utime(path, (mtime, mtime))


async def seeded(tmp_path: Path, url: str = "http://127.0.0.1:9", budget: int = 250) -> Path:
    """Sessions naming a1, a2 (live) and b1 (suspended); on disk also d1, d2 (dead, d1
    older) and another model's chunk."""
    l2 = tmp_path / "l2"
    l2.mkdir()
    path = tmp_path / "config.toml"
    path.write_text(
        tomli_w.dumps(
            {
                "session_store_path": str(tmp_path / "sessions.db"),
                "listen_addr": "127.0.0.1:9",
                "idle_suspend_s": 0,
                "idle_close_s": 0,
                "backend": "lmcache_mp",
                "model_name": MODEL,
                "lmcache_url": url,
                "lmcache_mp_l2_path": str(l2),
                "l2_budget_bytes": budget,
            }
        )
    )
    cfg, _ = load(str(path))
    async with Rig(cfg) as r:
        await r.turn_end("live", ["a1", "a2"])
        await r.turn_end("parked", ["b1"])
        await r.ev("session_suspend", session_id="parked")
        await r.settle()
    for i, h in enumerate(["a1", "a2", "b1", "d1", "d2"]):
        put(l2, h, 1000.0 + (5 - i if h.startswith("d") else i))
    put(l2, "ff", 1.0, model="other/model")
    return path


async def admin(*argv: str) -> tuple[int, str, str]:
    """main() on a thread of its own (its own loop: a stand-in on this loop can answer)."""
    out = io.StringIO()
    err = io.StringIO()

    def call() -> int:
        with contextlib.redirect_stderr(err):
            return main(list(argv), out)

    code = await asyncio.to_thread(call)
    return code, out.getvalue(), err.getvalue()


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


async def test_report_counts_dead_and_referenced(tmp_path: Path) -> None:
    cfg = await seeded(tmp_path)
    code, out, _ = await admin("--config", str(cfg), "l2-report", "--json")
    assert code == 0
    rep = json.loads(out)
    assert (rep["files"], rep["bytes"], rep["chunks"]) == (5, 500, 5)
    assert (rep["referenced_chunks"], rep["dead_chunks"], rep["dead_bytes"]) == (3, 2, 200)
    assert rep["over_budget"] and rep["delete_chunks"] == 2 and rep["still_over_budget"]
    assert rep["other_models"] == {"other/model": {"files": 1, "bytes": 100}}
    code, text, _ = await admin("--config", str(cfg), "l2-report")
    assert "dead: 2 chunks, 200 bytes" in text and "(OVER)" in text and "other model" in text


async def test_cleanup_dry_run_lists_and_changes_nothing(tmp_path: Path) -> None:
    cfg = await seeded(tmp_path)
    before = names(tmp_path / "l2")
    code, out, _ = await admin("--config", str(cfg), "l2-cleanup", "--dry-run")
    assert code == 0 and "dry run: nothing changed" in out
    listed = [line.split()[1] for line in out.splitlines() if line.startswith("delete ")]
    assert listed == ["d2", "d1"]  # oldest first (d2 was written before d1)
    assert names(tmp_path / "l2") == before


async def test_cleanup_yes_deletes_dead_files_only(tmp_path: Path) -> None:
    cfg = await seeded(tmp_path)
    code, out, err = await admin("--config", str(cfg), "l2-cleanup", "--yes", "--files-only")
    assert code == 0, err
    assert "done: deleted 2 chunks (2 files, 200 bytes)" in out
    assert "... 2/2 chunks" in err  # progress
    left = names(tmp_path / "l2")
    assert left == {file_name(MODEL, RANK, h) for h in ("a1", "a2", "b1")} | {
        file_name("other/model", RANK, "ff")
    }


async def test_cleanup_through_the_server_and_over_budget_only(tmp_path: Path) -> None:
    async with FakeLMCacheMPServer(l2_dir=tmp_path / "l2") as server:
        cfg = await seeded(tmp_path, url=server.url, budget=400)
        code, out, err = await admin("--config", str(cfg), "l2-cleanup", "--over-budget", "--yes")
        assert code == 0, err
        assert "done: deleted 1 chunks" in out
        assert file_name(MODEL, RANK, "d2") not in names(tmp_path / "l2")
        assert file_name(MODEL, RANK, "d1") in names(tmp_path / "l2")
        deletes = [b for m, _, b in server.requests if m == "DELETE" and b["keys"]]
        assert [k["chunk_hash_hex"] for k in deletes[0]["keys"]] == ["d2"]
        assert deletes[0]["tier"] == "all"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["l2-report", "--path", ""], 2, "no fs L2 folder"),
        (["l2-report", "--path", "/nonexistent/l2"], 1, "cannot read the fs L2 folder"),
        (["l2-cleanup", "--over-budget", "--yes"], 2, "--over-budget needs l2_budget_bytes"),
    ],
)
async def test_clear_errors(tmp_path: Path, argv: list[str], code: int, message: str) -> None:
    cfg = await seeded(tmp_path, budget=0)
    if argv[1:3] == ["--path", ""]:
        text = Path(cfg).read_text().replace(str(tmp_path / "l2"), "")
        Path(cfg).write_text(text)
    got, _, err = await admin("--config", str(cfg), *argv)
    assert got == code and message in err


async def test_a_deployments_folder_is_judged_by_its_namespace(tmp_path: Path) -> None:
    """--deployment: its folder and budget; only its namespace's sessions keep chunks."""
    from support.ns_rig import ident

    cfg = await seeded(tmp_path)  # sessions in the default namespace name a1, a2, b1
    own = tmp_path / "own"
    own.mkdir()
    put(own, "a1", 1.0)
    text = Path(cfg).read_text()
    dep = {"deployments": [{"name": "qa", **ident(), "lmcache_mp_l2_path": str(own)}]}
    Path(cfg).write_text(text + "\n" + tomli_w.dumps(dep))
    code, out, err = await admin("--config", str(cfg), "l2-report", "--deployment", "qa", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["path"] == str(own) and rep["dead_chunks"] == 1  # a1 is the default's
    code, _, err = await admin("--config", str(cfg), "l2-report", "--deployment", "nope")
    assert code == 2 and "unknown deployment 'nope' (deployments: qa)" in err
