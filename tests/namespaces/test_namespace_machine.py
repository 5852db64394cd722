"""Hypothesis state machine: two namespaces sharing hash strings never touch each other.

Events are routed by the daemon's own Namespaces.resolve and applied by the registered
handlers, as the service does (without I/O). After every step each namespace's refcounts
equal the recomputed model of its own sessions, and a step in one namespace leaves every
other namespace's sessions, refcounts and parked counts exactly as they were.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from support.ns_rig import config, ident

from ramakv_daemon.adapters.backends.noop import NoopBackend
from ramakv_daemon.bootstrap import NamespaceParts
from ramakv_daemon.commit.ledger import OutboxLedger
from ramakv_daemon.core.catalogue import Limits
from ramakv_daemon.core.errors import RamAKvError
from ramakv_daemon.core.fork import ForkIds
from ramakv_daemon.core.identity import namespace_of
from ramakv_daemon.core.manager import recompute_parked, recompute_refcounts
from ramakv_daemon.handlers import DEFAULT_REGISTRY
from ramakv_daemon.routing.namespaces import Namespaces

NS_A = namespace_of(ident())
NS_B = namespace_of(ident(model_id="other/model"))
SPACES = st.sampled_from([None, "", "qwen", "other", NS_A])
SIDS = st.sampled_from(["s1", "s2", "s3", "s4", "s5"])
HASHES = st.lists(st.sampled_from([f"{i:04x}" for i in range(6)]), max_size=6)


def build(tmp) -> Namespaces:
    cfg = config(
        tmp, [{"name": "qwen", **ident()}, {"name": "other", **ident(model_id="other/model")}]
    )
    fork_ids, ledger = ForkIds(), OutboxLedger()
    parts = NamespaceParts(
        cfg,
        DEFAULT_REGISTRY,
        Limits(),
        ledger,
        NoopBackend(),
        lambda url, loc: NoopBackend(),
        None,
        None,
        None,
    )
    spaces = Namespaces(cfg, fork_ids, parts.build)
    spaces.setup()
    return spaces


class NamespaceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile
        from pathlib import Path

        self.spaces = build(Path(tempfile.gettempdir()))
        self.t = 0.0

    def _view(self) -> dict:
        return {
            key: (dict(m.sessions), m.refcounts.as_dict(), dict(m.parked))
            for key, m in self.spaces.managers.items()
        }

    def _send(self, payload: dict) -> None:
        before = self._view()
        self.t += 1
        try:
            key = self.spaces.resolve(payload)
            handler = DEFAULT_REGISTRY.get(payload["type"])
            change = handler.apply(self.spaces[key].ctx, payload, self.t)  # type: ignore[misc]
        except RamAKvError:
            assert self._view() == before  # a refusal changes nothing anywhere
            return
        after = self._view()
        for other, state in before.items():
            if other != key:
                assert after[other] == state, f"event in {key!r} touched {other!r}"
        # Evictions name chunks of this namespace that nobody in it references any more.
        counts = self.spaces.managers[key].refcounts
        for h in change.evict_delete + change.evict_demote:
            assert counts.get(h) == 0
        # A session lives in exactly one namespace.
        owners: dict[str, str] = {}
        for k, m in self.spaces.managers.items():
            for sid in m.sessions:
                assert sid not in owners, f"{sid} in {owners[sid]!r} and {k!r}"
                owners[sid] = k
                assert m.sessions[sid].namespace == k

    @staticmethod
    def _with(payload: dict, ns: str | None) -> dict:
        return payload if ns is None else {**payload, "namespace": ns}

    @rule(sid=SIDS, ns=SPACES, hashes=HASHES)
    def turn_end(self, sid, ns, hashes) -> None:
        self._send(
            self._with(
                {
                    "type": "turn_end",
                    "session_id": sid,
                    "kv_transfer_params": {"chunk_hashes": hashes},
                },
                ns,
            )
        )

    @rule(
        sid=SIDS,
        ns=SPACES,
        kind=st.sampled_from(
            [
                "turn_start",
                "session_suspend",
                "session_close",
                "session_fork",
                "session_fork_end",
                "session_map",
            ]
        ),
    )
    def simple(self, sid, ns, kind) -> None:
        self._send(self._with({"type": kind, "session_id": sid}, ns))

    @rule(sid=SIDS, src=SIDS, ns=SPACES)
    def restore(self, sid, src, ns) -> None:
        self._send(
            self._with(
                {"type": "snapshot_restore", "session_id": sid, "source_session_id": src}, ns
            )
        )

    @rule(ns=SPACES, hashes=HASHES, force=st.booleans())
    def chunk_evict(self, ns, hashes, force) -> None:
        if hashes:
            self._send(
                self._with({"type": "chunk_evict", "chunk_hashes": hashes, "force": force}, ns)
            )

    @invariant()
    def each_namespace_matches_its_model(self) -> None:
        for m in self.spaces.managers.values():
            expected = recompute_refcounts(m.sessions.values(), m.forks.values())
            assert m.refcounts.as_dict() == expected
            assert m.parked == recompute_parked(m.sessions.values())

    @invariant()
    def fork_ids_are_unique_in_the_store(self) -> None:
        ids = [f.fork_id for m in self.spaces.managers.values() for f in m.forks.values()]
        assert len(ids) == len(set(ids))
        assert all(i < self.spaces.fork_ids.next_id for i in ids)
        for m in self.spaces.managers.values():  # a fork lives in its parent's namespace
            assert all(f.namespace == m.namespace for f in m.forks.values())


NamespaceMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=40, deadline=None
)
TestNamespaceMachine = NamespaceMachine.TestCase


def test_shared_hash_strings_are_separate_chunks(tmp_path) -> None:
    spaces = build(tmp_path)
    for ns, sid in (("qwen", "a"), ("other", "b")):
        key = spaces.resolve({"namespace": ns, "session_id": sid})
        spaces[key].manager.turn_end(sid, ["0001"])
    spaces[NS_A].manager.session_close("a")
    assert spaces[NS_A].manager.refcounts.as_dict() == {}
    assert spaces[NS_B].manager.refcounts.as_dict() == {"0001": 1}
