"""OpenAI Agents SDK hooks (the ``agents`` extra): ``RamAKvRunHooks`` names the run's session
on every model call and suspends / restores / closes it around slow tools and the run's end.

.. code-block:: python

    hooks = RamAKvRunHooks("thread-42", slow_tools={"run_tests"})
    result = await Runner.run(agent, "...", hooks=hooks, run_config=hooks.run_config())

The model must go through ramakv-proxy (``OpenAIChatCompletionsModel`` or the default
client with ``base_url`` the proxy's), which reports the turns it sees with that header.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from agents import Agent, ModelSettings, RunConfig, RunContextWrapper, RunHooks, Tool

from ramakv_sdk.hooks.signals import ON_END, SESSION_HEADER, SessionSignals, ToolFilter, is_slow


class RamAKvRunHooks(RunHooks[Any]):
    """RunHooks for one conversation (session).

    * tool start: ``session_suspend`` when the tool is one of ``slow_tools`` (names or a
      predicate on the name; the proxy's tool-pause timer covers the others);
    * tool end: ``snapshot_restore`` of a session it suspended, waiting at most
      ``restore_wait_ms`` for its chunks to be back in DDR before the next model call;
    * the agent's final output (the run's end): ``on_end="keep"`` (the conversation goes
      on) or ``"close"``.

    ``session_id`` defaults to the run config's ``group_id`` (the SDK's conversation id)
    when :meth:`run_config` is given one, else a fresh id.
    """

    def __init__(
        self,
        session_id: str | None = None,
        *,
        slow_tools: ToolFilter = None,
        on_end: str = "keep",
        signals: SessionSignals | None = None,
        restore_wait_ms: int = 1000,
    ) -> None:
        if on_end not in ON_END:
            raise ValueError(f"on_end must be one of {ON_END}, got {on_end!r}")
        self.session_id = session_id
        self.slow_tools = slow_tools
        self.on_end = on_end
        self.signals = signals or SessionSignals(restore_wait_ms=restore_wait_ms)

    def _sid(self) -> str:
        if self.session_id is None:
            self.session_id = f"agents-{uuid.uuid4().hex}"
        return self.session_id

    def run_config(self, config: RunConfig | None = None) -> RunConfig:
        """``config`` (or a new RunConfig) with the session header on every model call."""
        config = config or RunConfig()
        if self.session_id is None and config.group_id:
            self.session_id = config.group_id
        sid = self._sid()
        settings = config.model_settings or ModelSettings()
        headers = {**(settings.extra_headers or {}), SESSION_HEADER: sid}
        return replace(
            config,
            model_settings=settings.resolve(ModelSettings(extra_headers=headers)),
            group_id=config.group_id or sid,
        )

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        if is_slow(self.slow_tools, tool.name):
            await self.signals.suspend(self._sid(), "slow_tool")

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: Any
    ) -> None:
        await self.signals.restore(self._sid(), "tool_done")

    async def on_agent_end(self, context: Any, agent: Agent[Any], output: Any) -> None:
        if self.on_end == "close":
            await self.signals.close(self._sid(), "run_end")
