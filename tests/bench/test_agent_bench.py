"""bench.agent_bench's client and bookkeeping through a real ramakv-proxy and daemon, the
stand-in engine behind them: every turn is a plain OpenAI chat request (named by ``user``,
no ram-a-kv event from the client), both sides get identical prompts, and the figures
add up (counts only: the benchmark's own figures come from the real engine)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.reliability import wait_for

from bench import procs
from bench.agent_bench import Side, play_all, proxy, reusable_chunks
from bench.agent_script import END, QUICK, SLOW, agent_turns, script
from bench.engine_workload import Shape

ROOT = Path(__file__).resolve().parents[2]
SHAPE = Shape(sessions=4, live=2, turns=3, system_tokens=40, first_tokens=40, step_tokens=20)


def _answers(url: str) -> bool:
    try:
        httpx.get(url + "/v1/models", timeout=1)
    except httpx.HTTPError:
        return False
    return True


@pytest.fixture
def stand_in() -> Iterator[str]:
    port = procs.free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests/support/openai_engine.py"),
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # A hang guard: the wait ends when it answers (or exits).
        assert wait_for(lambda: _answers(url) or proc.poll() is not None, timeout=120)
        assert proc.poll() is None, "the stand-in engine exited"
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_script_keeps_the_engine_workloads_turns_pauses_and_ends() -> None:
    turns = agent_turns(Shape())
    assert len(turns) == Shape().sessions * Shape().turns
    ends = [t for t in turns if t[2] == END]
    assert len(ends) == Shape().sessions and all(t[1] == Shape().turns - 1 for t in ends)
    assert {a for _, _, a in turns} == {QUICK, SLOW, END}
    # Each session's turns in order; a quick tool's next turn follows at once.
    for i, (sid, index, after) in enumerate(turns):
        assert index == sum(1 for t in turns[:i] if t[0] == sid)
        if after == QUICK:
            assert turns[i + 1][:2] == (sid, index + 1)


def test_both_sides_play_the_same_plain_openai_requests(tmp_path: Path, stand_in: str) -> None:
    turns, system = script(SHAPE, lambda text: len(text.encode()))
    sides = []
    with (
        procs.daemon() as (a_port, _),
        procs.daemon() as (b_port, _),
        proxy(stand_in, f"http://127.0.0.1:{a_port}", tmp_path / "a.log") as a_url,
        proxy(stand_in, f"http://127.0.0.1:{b_port}", tmp_path / "b.log") as b_url,
    ):
        sides = [
            Side("alone", f"http://127.0.0.1:{a_port}", a_url),
            Side("steered", f"http://127.0.0.1:{b_port}", b_url),
        ]
        play_all(turns, system, (sides[0], sides[1]), 0.0)
        # Each conversation ends with its final answer: the proxy suspends it (run_end,
        # inferred); settle waits for that (a condition, bounded as a hang guard).
        assert all(side.settle() for side in sides)
        summaries = [s.summary() for s in sides]
    a, b = summaries
    assert a["turns"] == b["turns"] == len(turns)
    assert a["prompt_tokens"] == b["prompt_tokens"] > 0
    # Every turn but the last of each conversation calls its tool, and the proxy saw it.
    calls = sum(t.after != END for t in turns)
    assert a["tool_call_answers"] == b["tool_call_answers"] == calls
    assert a["proxy_tool_calls"] == b["proxy_tool_calls"] == calls
    assert a["proxy_suspends_run_end"] == b["proxy_suspends_run_end"] == SHAPE.sessions
    assert a["proxy_closes_idle"] == b["proxy_closes_idle"] == 0
    assert [t["chunk_hashes"] for t in sides[0].turns] == [
        t["chunk_hashes"] for t in sides[1].turns
    ]
    assert all(t["chunk_hashes"] for t in sides[0].turns)  # the stand-in's 16-byte chunks
    # Every later turn of a session starts with the chunks of its earlier ones.
    reusable = reusable_chunks(sides[0].turns)
    later = [n for t, n in zip(turns, reusable, strict=True) if t.index > 0]
    assert later and all(n > 0 for n in later)
    # The conversations grew as an agent's do: system, task, then call/result pairs.
    conv = sides[0].conversations[turns[-1].session]
    roles = [m["role"] for m in conv.messages]
    assert roles[:2] == ["system", "user"] and roles[2:] == ["assistant", "tool"] * (
        SHAPE.turns - 1
    )
