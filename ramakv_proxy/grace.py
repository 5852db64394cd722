"""The run end's grace, adapted: the 0.9 quantile of the return gaps the proxy observed
(a final answer, then the session's next request), clamped, starting at a default."""

from __future__ import annotations

from collections import deque

MIN_S = 0.5
MAX_S = 60.0
QUANTILE = 0.9
WINDOW = 256  # the last gaps kept: the grace follows today's clients, not last week's


class AdaptiveGrace:
    """``seconds`` is ``start`` until a gap is seen, then the gaps' 0.9 quantile in
    ``[MIN_S, MAX_S]``; ``start`` 0 means off (never adapts)."""

    def __init__(self, start: float) -> None:
        self.start = start
        self._gaps: deque[float] = deque(maxlen=WINDOW)

    def observe(self, gap: float) -> None:
        if self.start > 0:
            self._gaps.append(gap)

    @property
    def observed(self) -> int:
        return len(self._gaps)

    @property
    def seconds(self) -> float:
        if self.start <= 0 or not self._gaps:
            return self.start
        ordered = sorted(self._gaps)
        q = ordered[min(len(ordered) - 1, int(QUANTILE * len(ordered)))]
        return min(MAX_S, max(MIN_S, q))
