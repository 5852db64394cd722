"""The engine benchmark's workload as an OpenAI chat agent plays it: tool calls, tool
results, pauses and conversation ends, and nothing else (no ram-a-kv event).

The engine workload (bench.engine_workload) says, per session, how many turns it takes,
after which turns its tool is slow (the host suspended it there) and when it ends. Here
each turn is one ``/v1/chat/completions`` request that calls the session's tool (a named
``tool_choice``, so even the tiny model answers with a tool call), the tool's result is the
next user-visible message, and the last turn answers without a tool; then the client simply
stops. A quick tool's result comes back at once, so a session runs turn after turn until
its tool is slow; meanwhile the others run, as concurrent agents would. Texts are drawn
from the tiny tokenizer's corpus, sized in its tokens, so both sides get identical prompts.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.engine_workload import SUSPEND, TURN, Shape, schedule

QUICK, SLOW, END = "quick", "slow", "end"
TOOL_NAME = "run_tool"
TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Run the agent's next tool step",
        "parameters": {"type": "object", "properties": {}},
    },
}


@dataclass(slots=True)
class AgentTurn:
    """One request of one conversation: what comes after its answer (``QUICK``: the tool
    answers at once, ``SLOW``: the agent waits on it, ``END``: the final answer)."""

    session: str
    index: int
    after: str
    new_text: str = ""  # the user task (first turn) or the previous tool's result


@dataclass(slots=True)
class Conversation:
    """The messages one session has sent so far (both sides send the same)."""

    session: str
    system: str
    messages: list[dict[str, object]] = field(default_factory=list)

    def request(self, turn: AgentTurn, max_tokens: int) -> dict[str, object]:
        """The body of ``turn``'s request; the messages grow by its new text first."""
        if turn.index == 0:
            self.messages = [
                {"role": "system", "content": self.system},
                {"role": "user", "content": turn.new_text},
            ]
        else:
            call_id = f"call_{self.session}_{turn.index - 1}"
            self.messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": TOOL_NAME, "arguments": "{}"},
                        }
                    ],
                }
            )
            self.messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": turn.new_text}
            )
        tool_choice: object = (
            "none" if turn.after == END else {"type": "function", "function": {"name": TOOL_NAME}}
        )
        return {
            "model": "tiny",
            "messages": list(self.messages),
            "tools": [TOOL],
            "tool_choice": tool_choice,
            "max_tokens": max_tokens,
            "temperature": 0,
            # The session's name, as any OpenAI client can send it (the proxy's last rule).
            "user": self.session,
        }


def agent_turns(shape: Shape) -> list[tuple[str, int, str]]:
    """(session, turn index, after) in the order the client plays them: the engine
    schedule's turns, each session's quick-tool turns pulled together (its next request
    follows at once), the slow ones and the ends where the schedule has them."""
    steps = schedule(shape)
    per_session: dict[str, int] = {}
    raw: list[tuple[str, int, str]] = []
    for i, step in enumerate(steps):
        if step.kind != TURN:
            continue
        index = per_session.get(step.session, 0)
        per_session[step.session] = index + 1
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        last = index + 1 == shape.turns
        slow = nxt is not None and nxt.kind == SUSPEND and nxt.session == step.session
        raw.append((step.session, index, END if last else SLOW if slow else QUICK))
    out: list[tuple[str, int, str]] = []
    placed: set[tuple[str, int]] = set()
    for sid, index, after in raw:
        if (sid, index) in placed:
            continue
        out.append((sid, index, after))
        placed.add((sid, index))
        # A quick tool answers at once: the session's next turns follow until one waits.
        while after == QUICK:
            nxt_turn = next(t for t in raw if t[0] == sid and t[1] == index + 1)
            sid, index, after = nxt_turn
            out.append(nxt_turn)
            placed.add((sid, index))
    return out


def texts(shape: Shape, count_tokens: Callable[[str], int]) -> Callable[[int], str]:
    """A seeded source of texts of about ``n`` tokens (``count_tokens``: the engine's)."""
    from ascend_ext_dev.tiny_model import _CORPUS

    words = _CORPUS.split()
    rng = random.Random(shape.seed)

    def text(n: int) -> str:
        out: list[str] = []
        # Words run 1-3 tokens: grow by estimate, then trim to the count.
        while count_tokens(" ".join(out)) < n:
            out.extend(rng.choice(words) for _ in range(max(1, (n - len(out)) // 2)))
        while out and count_tokens(" ".join(out)) > n:
            out.pop()
        return " ".join(out)

    return text


def script(shape: Shape, count_tokens: Callable[[str], int]) -> tuple[list[AgentTurn], str]:
    """Every turn in play order, with its text, and the system prompt all sessions share
    (each side builds its own :class:`Conversation` per session from it)."""
    text = texts(shape, count_tokens)
    system = text(shape.system_tokens)
    turns = [
        AgentTurn(sid, index, after, text(shape.first_tokens if index == 0 else shape.step_tokens))
        for sid, index, after in agent_turns(shape)
    ]
    return turns, system
