"""The real-engine agent workload: a seeded schedule of turns, tool pauses and closes.

Sessions share a system prompt and grow turn by turn (each turn appends the model's answer
and a tool result); a few are open at once, taking turns round-robin. After most turns the
agent waits on a tool: the host suspends the session, other sessions run meanwhile (a pause
lasts ``pause_steps`` of their turns), and the host restores it one turn before its next. A
session closes after its last turn and a new one opens. Prompts are token-id lists
(completions with ``prompt: [ids]``), so the benchmark knows every prompt's chunk hashes
without a tokenizer; every length is a whole number of 256-token chunks, so what a turn
must recompute is its new tokens, not a partial chunk's leftovers.

``Shape`` (workload, tiers, model) and ``engine_settings`` are what other benchmarks reuse
(the agent benchmark through the proxy plays this shape).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from ascend_ext_dev.tiny_engine import EngineSettings
from ascend_ext_dev.tiny_model import COMPUTE, ModelShape

CHUNK = 256

TURN, SUSPEND, RESTORE, CLOSE = "turn", "suspend", "restore", "close"


@dataclass(frozen=True, slots=True)
class Shape:
    """Workload, tier sizes (chunks of 256 tokens) and the engines' model."""

    sessions: int = 30
    live: int = 8
    turns: int = 6
    system_tokens: int = 768
    first_tokens: int = 1792  # the task and the files it names: a miss costs a whole context
    step_tokens: int = 256
    p_pause: float = 0.8
    # A tool pause outlasts other sessions' whole lives: the paused session's chunks become
    # the least recently used while the closed sessions' dead chunks are the newest, so LRU
    # evicts the live context and keeps the dead one.
    pause_steps: int = 20
    # The open sessions' chunks peak at 84 (seed 7): DDR holds two thirds of them, disk
    # (which keeps a copy of every chunk) two more than all, so they fit only if dead chunks go.
    ddr_chunks: int = 56
    disk_chunks: int = 86
    vocab: int = 600  # token ids 3..599: inside the tiny tokenizer's 667
    seed: int = 7
    #: The engines' model: compute-bound (a 4 MiB chunk costs ~1 s of prefill on 2 cores).
    model: ModelShape = COMPUTE
    #: LMCache's disk tier through O_DIRECT: a disk hit reads the device, not the page cache.
    disk_odirect: bool = True

    @property
    def chunk_mib(self) -> float:
        return self.model.chunk_mib(CHUNK)


def engine_settings(shape: Shape, work_dir: Path, first_port: int) -> EngineSettings:
    """One engine for this shape: its model, DDR and disk tiers sized in chunks, ports from
    ``first_port`` (three: the server, the scheduler's memory API, the worker's)."""
    return EngineSettings(
        work_dir=work_dir,
        port=first_port,
        api_port_start=first_port + 1,
        chunk_size=CHUNK,
        ddr_gb=shape.ddr_chunks * shape.chunk_mib / 1024,
        disk_gb=shape.disk_chunks * shape.chunk_mib / 1024,
        model=shape.model,
        disk_odirect=shape.disk_odirect,
    )


@dataclass(slots=True)
class Step:
    """One thing the host does: a turn (its prompt's token ids) or a session event."""

    kind: str
    session: str
    prompt: list[int] = field(default_factory=list)


def schedule(shape: Shape) -> list[Step]:
    """The whole run, in order (deterministic for a seed)."""
    rng = random.Random(shape.seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(3, shape.vocab) for _ in range(n)]

    system = tokens(shape.system_tokens)
    contexts: dict[str, list[int]] = {}
    turns_left: dict[str, int] = {}
    paused: dict[str, int] = {}  # session -> steps until it may run again
    opened = 0
    steps: list[Step] = []

    def open_one() -> None:
        nonlocal opened
        sid = f"agent-{opened:02d}"
        opened += 1
        contexts[sid] = system + tokens(shape.first_tokens)
        turns_left[sid] = shape.turns

    while opened < min(shape.live, shape.sessions):
        open_one()
    order = list(contexts)
    while contexts:
        ready = [s for s in order if s in contexts and s not in paused]
        if not ready:  # every open session waits on a tool: the soonest answer comes first
            sid = min(paused, key=lambda s: paused[s])
            steps.append(Step(RESTORE, sid))
            del paused[sid]
            continue
        sid = ready[0]
        order.remove(sid)
        order.append(sid)
        steps.append(Step(TURN, sid, list(contexts[sid])))
        # A pause lasts ``pause_steps`` turns of the other sessions; the host restores a
        # session one turn before it runs again (the tool is about to answer).
        for other in list(paused):
            paused[other] -= 1
            if paused[other] == 0:
                steps.append(Step(RESTORE, other))
                del paused[other]
        turns_left[sid] -= 1
        if turns_left[sid] == 0:
            steps.append(Step(CLOSE, sid))
            del contexts[sid]
            order.remove(sid)
            if opened < shape.sessions:
                open_one()
                order.append(f"agent-{opened - 1:02d}")
            continue
        contexts[sid] += tokens(shape.step_tokens)  # the answer and the tool's result
        if rng.random() < shape.p_pause:
            steps.append(Step(SUSPEND, sid))
            paused[sid] = shape.pause_steps
    return steps
