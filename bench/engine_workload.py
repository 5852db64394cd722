"""The real-engine agent workload: a seeded schedule of turns, tool pauses and closes.

Sessions share a system prompt and grow turn by turn (each turn appends the model's answer
and a tool result); a few are open at once, taking turns round-robin. After some turns the
agent waits on a tool: the host suspends the session, other sessions run meanwhile, and the
host restores it one step before its next turn. A session closes after its last turn and a
new one opens. Prompts are token-id lists (completions with ``prompt: [ids]``), so the
benchmark knows every prompt's chunk hashes without a tokenizer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

TURN, SUSPEND, RESTORE, CLOSE = "turn", "suspend", "restore", "close"


@dataclass(frozen=True, slots=True)
class Shape:
    """Workload and tier sizes (chunks of 256 tokens; the tiny model's chunk is 0.5 MiB)."""

    sessions: int = 30
    live: int = 10
    turns: int = 6
    system_tokens: int = 768
    first_tokens: int = 800  # the task and the files it names: a miss costs a whole context
    step_tokens: int = 260
    p_pause: float = 0.5
    # A tool pause outlasts several other sessions' whole lives: the paused session's chunks
    # become the least recently used while the closed sessions' dead chunks are the newest,
    # so LRU evicts the live context and keeps the dead one.
    pause_steps: int = 40
    # The open sessions' chunks peak at 62 (for seed 7): DDR holds two thirds of them, disk
    # (which keeps a copy of every chunk) two more than all, so they fit only if dead chunks go.
    ddr_chunks: int = 40
    disk_chunks: int = 64
    vocab: int = 600  # token ids 3..599: inside the tiny tokenizer's 667
    seed: int = 7


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
        ready = [s for s in order if s in contexts and paused.get(s, 0) == 0]
        for sid in list(paused):
            paused[sid] -= 1
            if paused[sid] == 1:
                steps.append(Step(RESTORE, sid))  # the tool is about to answer
            if paused[sid] <= 0:
                del paused[sid]
        if not ready:
            continue
        sid = ready[0]
        order.remove(sid)
        order.append(sid)
        steps.append(Step(TURN, sid, list(contexts[sid])))
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
