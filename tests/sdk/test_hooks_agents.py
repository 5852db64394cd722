"""ramakv_sdk.hooks.agents with the real OpenAI Agents SDK, through ramakv-proxy to the
stand-in engine (which calls tools as vLLM does), and a real daemon."""

from __future__ import annotations

import pytest

agents = pytest.importorskip("agents", reason="the agents extra (openai-agents) is not installed")

from agents import (  # noqa: E402
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,  # noqa: E402
)
from openai import AsyncOpenAI  # noqa: E402
from support.trace_events import lifecycle_events  # noqa: E402

from ramakv_sdk.client import AsyncClient  # noqa: E402
from ramakv_sdk.hooks.agents import RamAKvRunHooks  # noqa: E402
from ramakv_sdk.hooks.signals import SessionSignals  # noqa: E402
from ramakv_sdk.lifecycle.clock import ManualClock  # noqa: E402

set_tracing_disabled(True)  # no export to OpenAI's tracing service from tests


@function_tool
def run_tests(path: str) -> str:
    """Run the test suite under a path."""
    return f"all tests under {path} passed"


def session_header(request: dict) -> str | None:
    return {k.lower(): v for k, v in request["headers"].items()}.get("x-session-id")


def agent_through(proxy_url: str) -> Agent:
    client = AsyncOpenAI(base_url=f"{proxy_url}/v1", api_key="unused", max_retries=0)
    model = OpenAIChatCompletionsModel(model="stand-in-model", openai_client=client)
    return Agent(name="coder", instructions="You fix bugs.", model=model, tools=[run_tests])


@pytest.mark.parametrize("on_end", ["keep", "close"])
async def test_slow_tool_suspends_and_restores_and_run_end_follows_the_policy(
    daemon_proc, engine, start_proxy, on_end: str
) -> None:
    # The proxy's own tool-pause timer never fires here (a manual clock nobody advances):
    # what happens is the hooks' doing.
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    client = AsyncClient(daemon_proc.url)
    hooks = RamAKvRunHooks(
        "thread-42", slow_tools={"run_tests"}, on_end=on_end, signals=SessionSignals(client)
    )
    try:
        result = await Runner.run(
            agent_through(proxy.url),
            "Fix the failing test, please.",
            hooks=hooks,
            run_config=hooks.run_config(),
        )
    finally:
        await client.aclose()
    assert result.final_output == engine.reply
    chats = [r for r in engine.requests if r["path"] == "/v1/chat/completions"]
    assert len(chats) == 2  # the tool call, then the answer after its result
    assert {session_header(r) for r in chats} == {"thread-42"}
    assert chats[1]["body"]["messages"][-1]["role"] == "tool"
    assert await proxy.sender.flush(120)
    want = [
        ("turn_start", None),
        ("turn_end", None),
        ("session_suspend", "slow_tool"),
        ("snapshot_restore", "tool_done"),
        ("turn_start", None),
        ("turn_end", None),
    ]
    if on_end == "close":
        want.append(("session_close", "run_end"))
    assert await lifecycle_events(daemon_proc.url, "thread-42", len(want)) == want


async def test_fast_tools_are_left_to_the_proxy(daemon_proc, engine, start_proxy) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    client = AsyncClient(daemon_proc.url)
    hooks = RamAKvRunHooks(signals=SessionSignals(client))  # no slow tools
    config = hooks.run_config(agents.RunConfig(group_id="conv-9"))
    try:
        await Runner.run(agent_through(proxy.url), "Run the tests.", hooks=hooks, run_config=config)
    finally:
        await client.aclose()
    assert hooks.session_id == "conv-9" and config.group_id == "conv-9"
    assert await proxy.sender.flush(120)
    types = [t for t, _ in await lifecycle_events(daemon_proc.url, "conv-9", 4)]
    assert types == ["turn_start", "turn_end", "turn_start", "turn_end"]
    assert proxy.lifecycle.stats.tool_calls == 1


def test_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="on_end must be one of"):
        RamAKvRunHooks("s", on_end="drop")
