"""The daemon's namespaces: one manager, handler context, dispatcher and budget each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ramakv_daemon.config import Config
from ramakv_daemon.core.budget import BudgetState
from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.errors import IllegalTransition, InvalidEvent
from ramakv_daemon.core.fork import ForkIds
from ramakv_daemon.core.manager import SessionManager
from ramakv_daemon.delivery.dispatcher import BackendDispatcher
from ramakv_daemon.deployments import DEFAULT_NAMESPACE, Deployment, default_namespace
from ramakv_daemon.handlers import HandlerContext
from ramakv_daemon.ports import Backend


@dataclass(slots=True)
class Namespace:
    """Everything one namespace owns."""

    key: str
    manager: SessionManager
    ctx: HandlerContext
    dispatcher: BackendDispatcher
    budget: BudgetState
    deployment: Deployment | None = None
    own_backend: Backend | None = None  # closed at stop (the shared default one is not)

    @property
    def label(self) -> str:
        """A short name for metrics and logs: the deployment's name, else the key."""
        if self.deployment is not None:
            return self.deployment.name
        return self.key or "default"

    @property
    def delivers(self) -> bool:
        """False for a namespace found only in the database: its outbox is kept, not sent."""
        return self.key == DEFAULT_NAMESPACE or self.deployment is not None

    @property
    def metric_label(self) -> str:
        """Bounded by the config: namespaces only in the database share one label."""
        return self.label if self.delivers else "unconfigured"

    @property
    def steered(self) -> bool:
        """False for a deployment without identity or a namespace no longer configured."""
        if self.key == DEFAULT_NAMESPACE:
            return True
        return self.deployment is not None and self.deployment.steered


class Namespaces:
    """namespace key -> :class:`Namespace`, plus resolving an event's namespace.

    The unnamed default namespace ``""`` always exists (the original nine events and all
    data written before namespaces live there). Every configured deployment has one; a
    namespace found in the database but no longer configured is loaded too (its sessions
    can still be read and closed) but steers nothing.
    """

    def __init__(
        self,
        config: Config,
        fork_ids: ForkIds,
        build: Callable[[Namespaces, str], Namespace],
    ) -> None:
        """``fork_ids``: the store-wide fork id counter (the committer stores it);
        ``build(namespaces, key)``:
        a namespace's parts (the composition root's, bootstrap.build_namespace)."""
        self.config = config
        self.fork_ids = fork_ids  # one counter for the whole store: fork ids are unique
        self.build = build
        self.default = default_namespace(config.deployments)
        self.deployments = {d.key: d for d in config.deployments}
        self.aliases: dict[str, str] = {}
        for d in config.deployments:
            self.aliases[d.name] = d.key
            self.aliases[d.key] = d.key
        self.by_key: dict[str, Namespace] = {}
        self.managers: dict[str, SessionManager] = {}

    def __iter__(self) -> Iterator[Namespace]:
        return iter(self.by_key.values())

    def __getitem__(self, key: str) -> Namespace:
        return self.by_key[key]

    def __contains__(self, key: object) -> bool:
        return key in self.by_key

    def setup(self) -> None:
        """Create the default namespace and every configured deployment's."""
        self.add(DEFAULT_NAMESPACE)
        for key in self.deployments:
            self.add(key)

    def add(self, key: str) -> Namespace:
        """The namespace ``key``, created on first use."""
        found = self.by_key.get(key)
        if found is not None:
            return found
        ns = self.build(self, key)
        self.managers[key] = ns.manager
        self.by_key[key] = ns
        return ns

    # ---- routing -----------------------------------------------------------------------
    def owner(self, session_id: str) -> str | None:
        """The namespace holding ``session_id`` (a session lives in exactly one); a closed
        session with open forks belongs to its forks' namespace."""
        for key, m in self.managers.items():
            if session_id in m.sessions:
                return key
        for key, m in self.managers.items():
            if m.forks.count(session_id):
                return key
        return None

    def resolve(self, payload: JsonObject) -> str:
        """The namespace an event is for.

        ``namespace`` absent or null: the session's own namespace when it exists, else the
        default (the single configured deployment, else ``""``). Given: a deployment's
        name or namespace, ``""``, or a namespace loaded from the database; a session (or
        ``source_session_id``) living in another namespace is an error naming both.
        """
        given = payload.get("namespace")
        sid = payload.get("session_id")
        sid = sid if isinstance(sid, str) else None
        if given is None:
            owner = self.owner(sid) if sid else None
            key = self.default if owner is None else owner
        else:
            if not isinstance(given, str):
                raise InvalidEvent("'namespace' must be a string")
            key = self.aliases.get(given, given)
            if key not in self.by_key:
                raise InvalidEvent(f"unknown namespace '{given}'")
            if sid:
                self._check_same(sid, key)
        source = payload.get("source_session_id")
        if isinstance(source, str) and source:
            self._check_same(source, key)
        return key

    def _check_same(self, session_id: str, key: str) -> None:
        owner = self.owner(session_id)
        if owner is not None and owner != key:
            raise IllegalTransition(
                f"session '{session_id}' belongs to namespace '{owner}', not '{key}'"
            )

    def describe(self) -> list[JsonObject]:
        """One row per namespace (list_namespaces, ramakv-admin)."""
        rows = []
        for ns in self:
            m = ns.manager
            suspended = m.suspended_count
            dep = ns.deployment
            rows.append(
                {
                    "namespace": ns.key,
                    "deployment": dep.name if dep else None,
                    "configured": ns.key == DEFAULT_NAMESPACE or dep is not None,
                    "steered": ns.steered,
                    "default": ns.key == self.default,
                    "backend": ns.dispatcher.backend.name,
                    "sessions": {"active": len(m.sessions) - suspended, "suspended": suspended},
                    "chunks": len(m.refcounts),
                    "ddr_budget_chunks": ns.budget.budget,
                    "demoted_sessions": len(ns.budget.demoted),
                    "evict_backlog": ns.dispatcher.backlog,
                }
            )
        return rows
