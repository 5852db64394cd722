"""``[[deployments]]`` config entries: name, identity -> namespace, lmcache_url, DDR budget,
idle policies."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ramakv_daemon.core.catalogue import JsonObject
from ramakv_daemon.core.identity import IDENTITY_FIELDS, is_namespace, namespace_of, problems
from ramakv_protocol.config_schema import url_problem

DEFAULT_NAMESPACE = ""  # the unnamed namespace of the original nine events
UNRESOLVED_PREFIX = "unresolved:"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_KEYS = frozenset(
    {"name", "namespace", "lmcache_url", "ddr_budget_chunks", "evict_locations", "identity"}
    | {"idle_suspend_s", "idle_close_s"}
    | {"lmcache_mp_l2_path", "l2_budget_bytes"}
    | set(IDENTITY_FIELDS)
)


@dataclass(frozen=True, slots=True)
class Deployment:
    """One model deployment the daemon steers.

    Attributes:
        name: the operator's label (metrics, logs; events may use it as ``namespace``).
        namespace: ``kvp-<32 hex>``, or None when the identity is incomplete.
        lmcache_url: this deployment's memory API (None = the top-level lmcache_url).
        ddr_budget_chunks: DDR budget in chunks (0 = no budget).
        evict_locations: tiers for refcount-zero eviction (None = the top-level setting).
        problems: why there is no namespace (empty when there is one).
        idle_suspend_s, idle_close_s: this deployment's idle policies (None = the
            top-level keys'; 0 = never).
        l2_path: its stock server's fs L2 folder (None: the top-level one covers it).
        l2_budget_bytes: that folder's budget (None = the top-level key's; 0 = none).
    """

    name: str
    namespace: str | None
    lmcache_url: str | None = None
    ddr_budget_chunks: int = 0
    evict_locations: tuple[str, ...] | None = None
    problems: tuple[str, ...] = ()
    idle_suspend_s: float | None = None
    idle_close_s: float | None = None
    l2_path: str | None = None
    l2_budget_bytes: int | None = None

    @property
    def key(self) -> str:
        """The namespace sessions are recorded under (``unresolved:<name>`` without one)."""
        return self.namespace or UNRESOLVED_PREFIX + self.name

    @property
    def steered(self) -> bool:
        """False when the identity is incomplete: nothing is prefetched or evicted."""
        return self.namespace is not None


def locations_of(value: object, where: str) -> tuple[str, ...]:
    """A list of tier names (empty = every tier)."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TypeError(f'{where} must be a list of tier names, e.g. ["LocalCPUBackend"]')
    return tuple(value)


def parse_deployment(raw: object, index: int) -> tuple[Deployment | None, list[str]]:
    """One ``[[deployments]]`` table; returns it (None if unusable) and warnings."""
    where = f"deployments[{index}]"
    if not isinstance(raw, dict):
        return None, [f"{where} must be a table; ignored"]
    warnings = [f"{where}: unknown key '{k}' ignored" for k in raw if k not in _KEYS]
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        return None, [*warnings, f"{where}: 'name' must match {_NAME_RE.pattern}; ignored"]
    fields = dict(raw.get("identity") or {}) if isinstance(raw.get("identity"), dict) else {}
    fields.update({k: v for k, v in raw.items() if k in IDENTITY_FIELDS})
    given = raw.get("namespace")
    computed = namespace_of(fields)
    why: list[str] = []
    if given is not None:
        if not is_namespace(given):
            why = [f"namespace {given!r} is not kvp-<32 lower-case hex>"]
            ns = None
        elif computed is not None and computed != given:
            why = [f"namespace {given} disagrees with the identity fields ({computed})"]
            ns = None
        else:
            ns = given
    else:
        ns = computed
        if ns is None:
            why = problems(fields)
    url = raw.get("lmcache_url")
    if url is not None and (why_not := url_problem(url)) is not None:
        warnings.append(f"{where}: 'lmcache_url' {why_not}; using the top-level one")
        url = None
    budget = raw.get("ddr_budget_chunks", 0)
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        warnings.append(f"{where}: 'ddr_budget_chunks' must be an integer >= 0; no budget")
        budget = 0
    locations = None
    if "evict_locations" in raw:
        try:
            locations = locations_of(raw["evict_locations"], f"{where}.evict_locations")
        except TypeError as err:
            warnings.append(f"{err}; using the top-level setting")
    idle = {k: _idle_of(raw, k, where, warnings) for k in ("idle_suspend_s", "idle_close_s")}
    dep = Deployment(
        name,
        ns,
        url,
        budget,
        locations,
        tuple(why),
        idle_suspend_s=idle["idle_suspend_s"],
        idle_close_s=idle["idle_close_s"],
    )
    l2_path = raw.get("lmcache_mp_l2_path")
    if l2_path is not None and (not isinstance(l2_path, str) or not l2_path or "\0" in l2_path):
        warnings.append(f"{where}: 'lmcache_mp_l2_path' must be a folder path; ignored")
        l2_path = None
    l2_budget = raw.get("l2_budget_bytes")
    if l2_budget is not None and (
        not isinstance(l2_budget, int) or isinstance(l2_budget, bool) or l2_budget < 0
    ):
        warnings.append(f"{where}: 'l2_budget_bytes' must be an integer >= 0; using the top-level")
        l2_budget = None
    if l2_path is not None or l2_budget is not None:
        dep = replace(dep, l2_path=l2_path, l2_budget_bytes=l2_budget)
    return dep, warnings


def _idle_of(raw: JsonObject, key: str, where: str, warnings: list[str]) -> float | None:
    """A deployment's idle policy: seconds >= 0, else None (the top-level key's) and a
    warning naming the bad value."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e12:
        warnings.append(f"{where}: '{key}' must be a number of seconds >= 0; using the top-level")
        return None
    return float(value)


def parse_deployments(value: object) -> tuple[tuple[Deployment, ...], list[str]]:
    """The whole ``[[deployments]]`` array; duplicate names or namespaces are dropped."""
    if not isinstance(value, list):
        return (), ["'deployments' must be an array of tables ([[deployments]]); ignored"]
    out: list[Deployment] = []
    warnings: list[str] = []
    for i, raw in enumerate(value):
        dep, w = parse_deployment(raw, i)
        warnings += w
        if dep is None:
            continue
        if any(d.name == dep.name or d.key == dep.key for d in out):
            warnings.append(f"deployments[{i}]: duplicate name or namespace; ignored")
            continue
        out.append(dep)
    return tuple(out), warnings


def default_namespace(deployments: tuple[Deployment, ...]) -> str:
    """The single configured deployment's namespace, else the unnamed default ``""``."""
    return deployments[0].key if len(deployments) == 1 else DEFAULT_NAMESPACE
