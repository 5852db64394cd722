"""ramakv_sdk.hooks.langchain with real LangGraph / LangChain (a prebuilt ReAct agent on
ChatOpenAI), through ramakv-proxy to the stand-in engine, and a real daemon."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
pytest.importorskip("langchain_openai", reason="the langgraph extra is not installed")

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from support.trace_events import lifecycle_events  # noqa: E402

from ramakv_sdk.client import AsyncClient  # noqa: E402
from ramakv_sdk.hooks.langchain import (  # noqa: E402
    RamAKvCallbackHandler,
    session_http_client,
)
from ramakv_sdk.hooks.signals import SessionSignals  # noqa: E402
from ramakv_sdk.lifecycle.clock import ManualClock  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # create_react_agent's move to langchain.agents
    from langgraph.prebuilt import create_react_agent

# LangGraph 1.x points at langchain.agents.create_agent (the `langchain` package, which
# this extra does not need); the prebuilt agent still works the same.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved")


@tool
def run_tests(path: str) -> str:
    """Run the test suite under a path."""
    return f"all tests under {path} passed"


def session_header(request: dict) -> str | None:
    return {k.lower(): v for k, v in request["headers"].items()}.get("x-session-id")


@pytest.mark.parametrize("on_end", ["keep", "close"])
async def test_thread_id_names_the_session_and_slow_tools_suspend(
    daemon_proc, engine, start_proxy, on_end: str
) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    http = session_http_client()
    model = ChatOpenAI(
        model="stand-in-model",
        base_url=f"{proxy.url}/v1",
        api_key="unused",
        http_async_client=http,
        max_retries=0,
    )
    client = AsyncClient(daemon_proc.url)
    handler = RamAKvCallbackHandler(
        slow_tools={"run_tests"}, on_end=on_end, signals=SessionSignals(client)
    )
    graph = create_react_agent(model, [run_tests])
    config = {"configurable": {"thread_id": "thread-7"}, "callbacks": [handler]}
    try:
        out = await graph.ainvoke({"messages": [("user", "Fix the failing test.")]}, config)
    finally:
        await client.aclose()
        await http.aclose()
    assert out["messages"][-1].content == engine.reply
    chats = [r for r in engine.requests if r["path"] == "/v1/chat/completions"]
    assert len(chats) == 2
    assert {session_header(r) for r in chats} == {"thread-7"}
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
    assert await lifecycle_events(daemon_proc.url, "thread-7", len(want)) == want


async def test_outside_a_thread_the_session_id_is_given(daemon_proc, engine, start_proxy) -> None:
    proxy = await start_proxy(engine.url, daemon_proc.url, clock=ManualClock())
    client = AsyncClient(daemon_proc.url)
    handler = RamAKvCallbackHandler(
        "fixed", slow_tools=lambda name: name.startswith("run_"), signals=SessionSignals(client)
    )
    http = session_http_client("fixed")
    model = ChatOpenAI(
        model="stand-in-model",
        base_url=f"{proxy.url}/v1",
        api_key="unused",
        http_async_client=http,
        max_retries=0,
    )
    graph = create_react_agent(model, [run_tests])
    try:
        await graph.ainvoke({"messages": [("user", "Run them.")]}, {"callbacks": [handler]})
    finally:
        await client.aclose()
        await http.aclose()
    assert handler.signals.sent == [
        ("session_suspend", "fixed", "slow_tool"),
        ("snapshot_restore", "fixed", "tool_done"),
    ]
    assert await proxy.sender.flush(120)
    assert [t for t, _ in await lifecycle_events(daemon_proc.url, "fixed", 6)] == [
        "turn_start",
        "turn_end",
        "session_suspend",
        "snapshot_restore",
        "turn_start",
        "turn_end",
    ]


def test_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="on_end must be one of"):
        RamAKvCallbackHandler(on_end="forget")
