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
