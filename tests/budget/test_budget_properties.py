"""budget.py and retention.py, property-tested: order, never in flight, never shared."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ramakv_daemon.core.budget import Holder, plan_demotions, resident
from ramakv_daemon.core.retention import Candidate, retention_key, retention_order

HASHES = st.sampled_from([f"{i:04x}" for i in range(12)])

holder_st = st.builds(
    lambda sid, susp, ts, fl, hs, dem: Holder(Candidate(sid, susp, ts, fl), frozenset(hs), dem),
    st.just(""),
    st.booleans(),
    st.integers(0, 5).map(float),
    st.booleans(),
    st.sets(HASHES, max_size=6),
    st.booleans(),
)


@st.composite
def holders(draw):
    raw = draw(st.lists(holder_st, max_size=8))
    # Unique ids.
    return [
        Holder(
            Candidate(
                f"s{i}", h.candidate.suspended, h.candidate.last_event_ts, h.candidate.in_flight
            ),
            h.hashes,
            h.demoted,
        )
        for i, h in enumerate(raw)
    ]


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 9).map(float), st.booleans()), max_size=10))
def test_retention_order(raw: list[tuple[bool, float, bool]]) -> None:
    cands = [Candidate(f"s{i}", susp, ts, fl) for i, (susp, ts, fl) in enumerate(raw)]
    by_id = {c.session_id: c for c in cands}
    order = retention_order(cands)
    # Every session without a turn in flight, and only those.
    assert sorted(order) == sorted(c.session_id for c in cands if not c.in_flight)
    listed = [by_id[s] for s in order]
    # Suspended ones first; within each group, longest idle (smallest timestamp) first.
    flags = [c.suspended for c in listed]
    assert flags == sorted(flags, reverse=True)
    for x, y in zip(listed, listed[1:], strict=False):
        if x.suspended == y.suspended:
            assert x.last_event_ts <= y.last_event_ts
    assert [retention_key(c) for c in listed] == sorted(retention_key(c) for c in listed)


@settings(max_examples=400)
@given(holders(), st.integers(0, 14))
def test_plan_demotions(hs: list[Holder], budget: int) -> None:
    plan = plan_demotions(hs, budget)
    before = resident(hs)
    assert plan.usage_before == len(before)
    victims = set(plan.victims)
    after = [
        Holder(h.candidate, h.hashes, h.demoted or h.candidate.session_id in victims) for h in hs
    ]
    res_after = resident(after)
    by_id = {h.candidate.session_id: h for h in hs}
    # Usage is exactly what stays resident; demoted = what left DDR.
    assert plan.usage_after == len(res_after)
    assert set(plan.demote) == before - res_after and len(plan.demote) == len(set(plan.demote))
    # Never a victim with a turn in flight, never one already demoted.
    assert all(not by_id[v].candidate.in_flight and not by_id[v].demoted for v in victims)
    assert all(h.in_ddr for h in hs if h.candidate.in_flight)
    # Never a chunk still held by a session entitled to DDR (in flight or not demoted).
    assert not set(plan.demote) & res_after
    for h in hs:
        if h.candidate.in_flight:
            assert not set(plan.demote) & h.hashes
    # Only the victims' own chunks.
    assert set(plan.demote) <= set().union(*(by_id[v].hashes for v in victims))
    # Victims are a prefix of the retention order of eligible sessions.
    eligible = retention_order(h.candidate for h in hs if h.in_ddr)
    assert plan.victims == eligible[: len(plan.victims)]
    # Stops as soon as the budget is met; goes on until it is or nobody is left.
    if budget <= 0 or plan.usage_before <= budget:
        assert plan.victims == []
    else:
        assert plan.usage_after <= budget or plan.victims == eligible
        if len(plan.victims) > 1:
            trial = plan_demotions(hs, budget)
            assert trial.victims == plan.victims  # deterministic


def test_shared_chunk_waits_for_its_last_holder() -> None:
    a = Holder(Candidate("a", False, 1.0), frozenset({"x", "s"}))
    b = Holder(Candidate("b", False, 2.0), frozenset({"y", "s"}))
    c = Holder(Candidate("c", False, 0.0, in_flight=True), frozenset({"z", "y"}))
    plan = plan_demotions([a, b, c], budget=2)
    # a (longest idle) goes first, but "s" is shared with b; then b, but "y" is in flight.
    assert plan.victims == ["a", "b"] and plan.demote == ["x", "s"]
    assert plan.usage_after == 2


def test_suspended_before_idle() -> None:
    a = Holder(Candidate("a", False, 0.0), frozenset({"a"}))
    s = Holder(Candidate("s", True, 9.0), frozenset({"f"}))  # a fork hold of a suspended one
    assert plan_demotions([a, s], budget=1).victims == ["s"]


SESSION_HASHES = st.lists(HASHES, max_size=6)


@st.composite
def namespaces_state(draw):
    """Sessions (active or suspended, with fork holds), and which are demoted / in flight."""
    from ramakv_daemon.core.session import Session

    n = draw(st.integers(0, 7))
    sessions = {}
    holds = {}
    for i in range(n):
        sessions[f"s{i}"] = Session(
            f"s{i}",
            chunk_hashes=tuple(draw(SESSION_HASHES)),
            suspended=draw(st.booleans()),
            last_event_ts=float(draw(st.integers(0, 5))),
        )
        holds[f"s{i}"] = [
            tuple(dict.fromkeys(h)) for h in draw(st.lists(SESSION_HASHES, max_size=2))
        ]
    demoted = {s for s in sessions if draw(st.booleans())}
    flying = {s for s in sessions if draw(st.booleans())}
    return sessions, holds, demoted, flying


@settings(max_examples=400)
@given(namespaces_state(), st.integers(0, 14))
def test_plan_from_refcounts_equals_plan_demotions(state, budget: int) -> None:
    """The daemon's fast plan (from the refcount table) is the pure plan, exactly."""
    from ramakv_daemon.core.budget import holder_of, plan_from_refcounts
    from ramakv_daemon.core.fork import Fork
    from ramakv_daemon.core.manager import recompute_refcounts

    sessions, holds, demoted, flying = state
    holders_ = [
        holder_of(s, demoted=sid in demoted, in_flight=sid in flying, fork_holds=holds[sid])
        for sid, s in sessions.items()
    ]
    slow = plan_demotions(holders_, budget)
    forks = [Fork(0, sid, h, 0.0) for sid, hs in holds.items() for h in hs]
    fast = plan_from_refcounts(
        sessions, recompute_refcounts(sessions.values(), forks), demoted, flying, budget, holds
    )
    assert fast.victims == slow.victims
    assert sorted(fast.demote) == sorted(slow.demote)
    assert (fast.usage_before, fast.usage_after) == (slow.usage_before, slow.usage_after)
