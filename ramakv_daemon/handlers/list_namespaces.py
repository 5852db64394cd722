"""list_namespaces (admin): every namespace with its deployment, sessions, chunks, budget."""

from ramakv_daemon.core.change import Change
from ramakv_daemon.handlers.messages import Bare
from ramakv_daemon.handlers.registry import READ, HandlerContext, typed_event


class ListNamespaces(Bare, frozen=True, tag="list_namespaces"):
    """list_namespaces' message: no fields."""


@typed_event(
    ListNamespaces,
    "Admin: list namespaces (namespace, deployment, configured, steered, default, backend, "
    "sessions by state, chunks, ddr_budget_chunks, demoted_sessions, evict_backlog)",
    effects=READ,
)
def list_namespaces(ctx: HandlerContext, msg: ListNamespaces, now: float) -> Change:
    if ctx.namespace_info is not None:
        rows = ctx.namespace_info()
    else:
        rows = [
            {"namespace": ns, "sessions": len(m.sessions), "chunks": len(m.refcounts)}
            for ns, m in ctx.every().items()
        ]
    return Change(data={"namespaces": rows})
