"""list_sessions skips to its offset by bisecting its sorted runs: the ids left are those a
merge would give after dropping the offset's first ids, for any runs and offset."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from ramakv_daemon.handlers.list_sessions import _without_smallest


@given(
    st.lists(st.text(max_size=4), unique=True, max_size=60),
    st.lists(st.integers(0, 5), max_size=60),
    st.integers(0, 70),
)
def test_skipping_by_bisection_matches_a_merge(ids: list[str], to_run: list[int], k: int) -> None:
    runs: list[list[str]] = [[] for _ in range(6)]
    for i, sid in enumerate(ids):
        runs[to_run[i] if i < len(to_run) else 0].append(sid)
    runs = [sorted(r) for r in runs]
    assert list(heapq.merge(*_without_smallest(runs, k))) == sorted(ids)[k:]
