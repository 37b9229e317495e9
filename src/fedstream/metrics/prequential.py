"""Prequential (test-then-train) error: every sample is predicted before it is learned."""

from __future__ import annotations

import numpy as np


class Prequential:
    """Accumulated error over the run and the error rate of each ``interval`` rounds."""

    def __init__(self, interval: int):
        self.interval = interval
        self.rounds = 0
        self.errors = 0
        self._interval_errors = 0
        self.intervals: list[float] = []

    def update(self, y_true: int, y_pred: int) -> None:
        wrong = int(y_true != y_pred)
        self.rounds += 1
        self.errors += wrong
        self._interval_errors += wrong
        if self.rounds % self.interval == 0:
            self.intervals.append(self._interval_errors / self.interval)
            self._interval_errors = 0

    def update_many(self, y_true: np.ndarray, y_pred: np.ndarray) -> None:
        """:meth:`update` for consecutive rounds that do not cross an interval's end, except at
        their last round (how a stack of runs reports a segment of rounds at once)."""
        n = len(y_true)
        if n == 0:
            return
        if (self.rounds % self.interval) + n > self.interval:
            raise ValueError(
                f"{n} rounds from round {self.rounds} cross the end of a {self.interval}-round interval"
            )
        wrong = int(np.count_nonzero(np.asarray(y_true) != np.asarray(y_pred)))
        self.rounds += n
        self.errors += wrong
        self._interval_errors += wrong
        if self.rounds % self.interval == 0:
            self.intervals.append(self._interval_errors / self.interval)
            self._interval_errors = 0

    @property
    def accumulated_error(self) -> float:
        return self.errors / self.rounds if self.rounds else float("nan")

    @property
    def current_interval_error(self) -> float:
        """The error so far in the unfinished interval (for progress bars)."""
        n = self.rounds % self.interval
        return self._interval_errors / n if n else (self.intervals[-1] if self.intervals else float("nan"))

    def state_dict(self) -> dict[str, np.ndarray]:
        return {
            "counts": np.array([self.rounds, self.errors, self._interval_errors], dtype=np.int64),
            "intervals": np.array(self.intervals, dtype=np.float64),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.rounds, self.errors, self._interval_errors = (int(v) for v in state["counts"])
        self.intervals = [float(v) for v in state["intervals"]]
