"""What engine_lru's model predicts for the agent benchmark's play order and a close policy.

    python -m bench.agent_lru

The agent client plays the engine schedule's turns in its own order (a session's quick-tool
turns back to back, bench.agent_script) and nobody closes a session but the proxy: when it
does decides whether a finished conversation's chunks are gone before they push out the
paused live ones. A close policy here is how many turns of the run come between a
session's final answer and its close (None: not before the run ends); the prompts are the
schedule's own (whole chunks), so the figures leave out the chat template's partial chunks,
which both sides recompute alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from bench.agent_script import END, agent_turns
from bench.engine_lru import lru_recomputed
from bench.engine_workload import CLOSE, TURN, Shape, Step, schedule

#: Turns between a final answer and its close, given the final answer's place in the run.
Lateness = Callable[[int], int | None]


def agent_steps(shape: Shape, late: Lateness) -> list[Step]:
    """The schedule's turns in the agent client's order, each session's close ``late(n)``
    turns after its final answer (turn ``n`` of the run)."""
    prompts: dict[tuple[str, int], list[int]] = {}
    seen: dict[str, int] = {}
    for step in schedule(shape):
        if step.kind == TURN:
            index = seen.get(step.session, 0)
            seen[step.session] = index + 1
            prompts[(step.session, index)] = step.prompt
    out: list[Step] = []
    due: list[tuple[int, str]] = []
    for n, (sid, index, after) in enumerate(agent_turns(shape)):
        for item in [d for d in due if d[0] <= n]:
            out.append(Step(CLOSE, item[1]))
            due.remove(item)
        out.append(Step(TURN, sid, prompts[(sid, index)]))
        k = late(n) if after == END else None
        if k is not None:
            due.append((n + 1 + k, sid))
    return out


def predict(shape: Shape | None = None) -> dict[str, object]:
    """Recomputed tokens of one LRU of the disk tier without closes (LMCache alone) and,
    steered, with a close of each finished session: at once, one turn late for the
    sessions whose final answer the steered side gives second (its next request comes
    1.2 s later: a grace longer than that), one turn late always, never."""
    shape = shape or Shape()
    alone = lru_recomputed(agent_steps(shape, lambda n: None), shape.disk_chunks, False)
    policies: dict[str, Lateness] = {
        "at_once": lambda n: 0,
        "late_when_second": lambda n: 1 if n % 2 == 0 else 0,  # play_all: steered 2nd on even
        "one_turn_late": lambda n: 1,
        "never": lambda n: None,
    }
    out: dict[str, object] = {"alone": alone}
    for name, late in policies.items():
        steered = lru_recomputed(agent_steps(shape, late), shape.disk_chunks, True)
        out[name] = {"steered": steered, "gain": round(alone / steered, 3)}
    return out


if __name__ == "__main__":
    print(json.dumps(predict(), indent=1))
