"""LangChain / LangGraph hooks (the ``langgraph`` extra): the thread's session on every model
call as ``X-Session-ID``, and a callback handler that suspends / restores / closes it around
slow tools and the run's end.

.. code-block:: python

    model = ChatOpenAI(base_url=PROXY + "/v1", http_async_client=session_http_client())
    graph = create_react_agent(model, tools)
    config = {"configurable": {"thread_id": "thread-42"},
              "callbacks": [RamAKvCallbackHandler(slow_tools={"run_tests"})]}
    await graph.ainvoke({"messages": [...]}, config)

The session is LangGraph's ``thread_id`` (``configurable.thread_id``, which LangGraph also
puts in every callback's metadata); outside a thread, give the same ``session_id`` to the
handler and to :func:`session_http_client` (a handler without one names each root run
``langchain-<run id>``, which no model call carries, so its events find no session).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import httpx
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.runnables.config import var_child_runnable_config

from ramakv_sdk.hooks.signals import ON_END, SESSION_HEADER, SessionSignals, ToolFilter, is_slow


def current_thread_id() -> str | None:
    """The ``configurable.thread_id`` of the LangChain run the caller is inside, if any."""
    config = var_child_runnable_config.get()
    if not config:
        return None
    thread = (config.get("configurable") or {}).get("thread_id")
    if thread is None:
        thread = (config.get("metadata") or {}).get("thread_id")
    return str(thread) if thread is not None and str(thread) else None


def _namer(session_id: str | None) -> Any:
    def name(request: httpx.Request) -> None:
        if SESSION_HEADER not in request.headers:
            sid = session_id or current_thread_id()
            if sid is not None:
                request.headers[SESSION_HEADER] = sid

    return name


def session_http_client(session_id: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
    """An httpx.AsyncClient for ``ChatOpenAI(http_async_client=...)`` that sends the
    session as X-Session-ID on every request: ``session_id``, else the current LangGraph
    thread's id (none outside a thread). Other kwargs go to httpx."""
    name = _namer(session_id)

    async def name_async(request: httpx.Request) -> None:
        name(request)

    hooks = kwargs.pop("event_hooks", None) or {}
    hooks = {**hooks, "request": [name_async, *hooks.get("request", [])]}
    return httpx.AsyncClient(event_hooks=hooks, **kwargs)


def session_http_client_sync(session_id: str | None = None, **kwargs: Any) -> httpx.Client:
    """The same for ``ChatOpenAI(http_client=...)`` (synchronous invoke)."""
    hooks = kwargs.pop("event_hooks", None) or {}
    hooks = {**hooks, "request": [_namer(session_id), *hooks.get("request", [])]}
    return httpx.Client(event_hooks=hooks, **kwargs)


class RamAKvCallbackHandler(AsyncCallbackHandler):
    """Callbacks for LangChain / LangGraph runs.

    * tool start: ``session_suspend`` when the tool is one of ``slow_tools`` (names or a
      predicate on the name; ramakv-proxy's tool-pause timer covers the others);
    * tool end (or error): ``snapshot_restore`` of a session it suspended, waiting at most
      ``restore_wait_ms`` for its chunks to be in DDR before the next model call;
    * the root run's end: ``on_end="keep"`` (the thread goes on) or ``"close"``.
    """

    run_inline = True  # in the run's own task: the restore is done before the next call

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
        self._roots: dict[UUID, UUID] = {}  # run -> its root run
        self._sessions: dict[UUID, str] = {}  # root run -> session

    def _session(self, run_id: UUID, parent: UUID | None, metadata: dict[str, Any] | None) -> str:
        root = self._roots.get(parent, parent) if parent is not None else run_id
        self._roots[run_id] = root
        sid = self._sessions.get(root)
        if sid is None:
            thread = (metadata or {}).get("thread_id")
            sid = self.session_id or (str(thread) if thread is not None else None)
            sid = sid or current_thread_id() or f"langchain-{root}"
            self._sessions[root] = sid
        return sid

    async def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._session(run_id, parent_run_id, metadata)

    async def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        sid = self._session(run_id, parent_run_id, metadata)
        name = kwargs.get("name") or (serialized or {}).get("name") or ""
        if is_slow(self.slow_tools, str(name)):
            await self.signals.suspend(sid, "slow_tool")

    async def on_tool_end(
        self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        await self._tool_done(run_id, parent_run_id)

    async def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        await self._tool_done(run_id, parent_run_id)

    async def _tool_done(self, run_id: UUID, parent: UUID | None) -> None:
        sid = self._session(run_id, parent, None)
        self._roots.pop(run_id, None)
        await self.signals.restore(sid, "tool_done")

    async def on_chain_end(
        self,
        outputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._finish(run_id, parent_run_id)
        if parent_run_id is None:
            sid = self._sessions.pop(run_id, None)
            if sid is not None and self.on_end == "close":
                await self.signals.close(sid, "run_end")

    async def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        self._finish(run_id, parent_run_id)
        if parent_run_id is None:
            self._sessions.pop(run_id, None)

    def _finish(self, run_id: UUID, parent: UUID | None) -> None:
        if parent is not None:
            self._roots.pop(run_id, None)
        else:
            for run in [r for r, root in self._roots.items() if root == run_id]:
                del self._roots[run]
