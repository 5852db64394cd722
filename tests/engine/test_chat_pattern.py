"""The OpenAI Agents SDK's everyday chat pattern on the real engine, through ramakv-proxy with
its default flags (issue 31): each user message is one ``Runner.run(agent, history +
[message])`` that calls a tool and answers in text. That answer looks like the end of the
agent's run, but the user writes again: the proxy must suspend the session (an inferred,
never-deleting signal), not close it, and the user's next message must find its private
context in cache."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import pytest
from support.daemon_proc import DaemonProcess
from support.engine_rig import CHUNK, HTTP_TIMEOUT_S, start_engine, text
from support.tool_turns import TOOL_ARGS, session_state, wait_for

from ascend_ext_dev.tiny_engine import EngineProcess

pytestmark = pytest.mark.engine

USERS = ("chat-user-a", "chat-user-b")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    """The engine with every ascend_ext patch and tool calling on."""
    e = start_engine(tmp_path_factory.mktemp("engine"), extra_args=TOOL_ARGS)
    try:
        yield e
    finally:
        e.stop()


class Calls:
    """Each chat call's session and answer, in order (an httpx2 response hook: the openai
    package speaks httpx2)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    async def on_response(self, response: Any) -> None:
        await response.aread()
        if "chat/completions" in str(response.request.url):
            sid = response.request.headers.get("x-session-id", "")
            self.seen.append((sid, response.json()))

    def of(self, sid: str) -> list[dict[str, Any]]:
        return [body for s, body in self.seen if s == sid]


def proxy_stats(proxy: Any) -> dict[str, Any]:
    stats = httpx.get(proxy.url + "/_ramakv/stats", timeout=10).json()
    return stats.get("lifecycle", stats)


def run_end_signalled(proxy: Any, daemon: DaemonProcess) -> dict[str, Any] | None:
    """The proxy's run-end decision for both users, whichever it took (suspend, or the
    close it made before issue 31): its counters and the daemon's states, or None yet."""
    life = proxy_stats(proxy)
    states = {sid: session_state(daemon, sid) for sid in USERS}
    suspended = life.get("suspends_run_end", 0) >= len(USERS) or all(
        s == "suspended" for s in states.values()
    )
    if suspended or life.get("closes_run_end", 0) >= 1:
        return {"lifecycle": life, "states": states}
    return None


def test_a_chat_users_next_message_finds_its_context_after_the_run_end(
    engine: EngineProcess, steering_daemon: DaemonProcess, proxy: Any
) -> None:
    pytest.importorskip("agents", reason="the agents extra (openai-agents) is not installed")
    import httpx2
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    calls = Calls()
    system = text("shared support prompt", 400)  # ~1,000 tokens: text() runs ~2.7 a unit

    @function_tool
    def look_up(path: Literal["."]) -> str:
        """Look the user's question up."""
        return "found: the answer is in section four"

    async def message(http: Any, sid: str, history: list[Any], content: str) -> list[Any]:
        client = AsyncOpenAI(
            base_url=proxy.url + "/v1", api_key="x", max_retries=0, http_client=http
        )
        agent = Agent(
            name="assistant",
            instructions=system,
            model=OpenAIChatCompletionsModel(model="tiny", openai_client=client),
            tools=[look_up],
            # named: the tiny model calls it; the SDK resets tool_choice after the call, so
            # the run's second call answers in text (what the proxy takes as the run's end)
            model_settings=ModelSettings(
                tool_choice="look_up",
                max_tokens=24,
                temperature=0,
                extra_headers={"X-Session-ID": sid},
            ),
        )
        turn = [*history, {"role": "user", "content": content}]
        result = await Runner.run(agent, turn, max_turns=4)
        return result.to_input_list()

    async def both(histories: dict[str, list[Any]], contents: dict[str, str]) -> None:
        http = httpx2.AsyncClient(
            timeout=HTTP_TIMEOUT_S, event_hooks={"response": [calls.on_response]}
        )
        try:
            done = await asyncio.gather(
                *(message(http, sid, histories[sid], contents[sid]) for sid in USERS)
            )
        finally:
            await http.aclose()
        histories.update(zip(USERS, done, strict=True))

    histories: dict[str, list[Any]] = {sid: [] for sid in USERS}
    first = {sid: text(f"{sid} notes", 300) + "\nWhat do they say?" for sid in USERS}
    asyncio.run(both(histories, first))
    for sid in USERS:
        assert len(calls.of(sid)) == 2, calls.of(sid)  # the tool call, then the text answer
        assert calls.of(sid)[0]["choices"][0]["message"].get("tool_calls"), calls.of(sid)
    context_tokens = {sid: calls.of(sid)[0]["usage"]["prompt_tokens"] for sid in USERS}

    # The user reads the answer; meanwhile the proxy acts on the run's apparent end.
    seen = wait_for(lambda: run_end_signalled(proxy, steering_daemon), "the proxy's run-end signal")
    assert not seen["lifecycle"].get("closes_run_end"), (
        "the proxy closed the sessions at the run's end instead of suspending them",
        seen,
    )
    assert seen["lifecycle"].get("suspends_run_end", 0) >= len(USERS) or all(
        s == "suspended" for s in seen["states"].values()
    ), seen

    asyncio.run(both(histories, {sid: "And the second point?" for sid in USERS}))
    for sid in USERS:
        answer = calls.of(sid)[2]  # the second message's first call
        full_chunks = context_tokens[sid] // CHUNK * CHUNK
        cached = int((answer.get("kv_transfer_params") or {}).get("num_lmcache_cached_tokens", 0))
        details = (answer["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        assert max(cached, int(details)) >= full_chunks, (sid, cached, details, full_chunks)
