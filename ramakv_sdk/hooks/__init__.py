"""Agent-framework hooks (optional extras): name each run's session for ramakv-proxy and tell
the daemon when a slow tool runs, when it is done and when the run ends.

* :mod:`ramakv_sdk.hooks.agents` — the OpenAI Agents SDK (``pip install "ram-a-kv[agents]"``)
* :mod:`ramakv_sdk.hooks.langchain` — LangChain / LangGraph (``pip install
  "ram-a-kv[langgraph]"``)

Both send the session on every model call as ``X-Session-ID`` (the proxy's first naming
source), so the proxy reports the turns; the hooks add what only the framework knows.
"""

from ramakv_sdk.hooks.signals import SESSION_HEADER, SessionSignals, ToolFilter

__all__ = ["SESSION_HEADER", "SessionSignals", "ToolFilter"]
