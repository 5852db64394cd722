"""The run end's grace, adapted to how the recent run ends turned out: the smallest grace
that fewer than one run end in ten came back after, clamped, starting at a default.

Each run end (an agent's final answer) is one observation: its return gap (the session's
next request came that long after), or, when no request came within ``HORIZON_S`` or the
session was closed first, a run end that needed no grace (a gap of 0). The grace is then
the 0.9 quantile of the observations: with every session returning, of the return gaps;
with more than nine in ten never returning, ``MIN_S``."""

from __future__ import annotations

from collections import deque

MIN_S = 0.5
MAX_S = 60.0
#: A run end with no return this long after it counts as one that needed no grace. No
#: grace this module picks is longer (MAX_S), so a later return is one no grace would have
#: kept warm for: it must not lengthen the grace. Shorter would drop returns a grace can
#: still catch; longer only keeps sessions remembered for nothing.
HORIZON_S = MAX_S
QUANTILE = 0.9
WINDOW = 256  # the last run ends kept: the grace follows today's clients, not last week's


class AdaptiveGrace:
    """``seconds`` is ``start`` until a run end's outcome is seen, then the 0.9 quantile of
    the outcomes (no return = 0) in ``[MIN_S, MAX_S]``; ``start`` 0 means off (never
    adapts, no horizon)."""

    def __init__(self, start: float) -> None:
        self.start = start
        self._gaps: deque[float] = deque(maxlen=WINDOW)

    @property
    def horizon(self) -> float:
        """How long a run end waits for its session's return (0 = off: never learns)."""
        return HORIZON_S if self.start > 0 else 0.0

    def observe(self, gap: float) -> None:
        """A run end's session came back ``gap`` seconds after its final answer."""
        if self.start > 0:
            self._gaps.append(gap)

    def observe_no_return(self) -> None:
        """A run end's session did not come back within the horizon, or was closed first."""
        self.observe(0.0)

    @property
    def observed(self) -> int:
        return len(self._gaps)

    @property
    def seconds(self) -> float:
        if self.start <= 0 or not self._gaps:
            return self.start
        ordered = sorted(self._gaps)
        # The smallest g with fewer than 10 % of the outcomes above it.
        q = ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))]
        return min(MAX_S, max(MIN_S, q))
