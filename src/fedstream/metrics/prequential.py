"""Prequential (test-then-train) error: every sample is predicted before it is learned."""

from __future__ import annotations

import numpy as np

from fedstream.metrics.collapse import collapse_fields


class Prequential:
    """Accumulated error over the run and the error rate of each ``interval`` rounds; per
    interval also the share of its most-predicted class (``top_shares``) and of its most
    frequent label (``label_shares``), which tell a collapsed model apart
    (:mod:`fedstream.metrics.collapse`)."""

    def __init__(self, interval: int):
        self.interval = interval
        self.rounds = 0
        self.errors = 0
        self._interval_errors = 0
        self.intervals: list[float] = []
        self.top_shares: list[float] = []
        self.label_shares: list[float] = []
        self._predicted: dict[int, int] = {}  # the unfinished interval's counts per class
        self._labels: dict[int, int] = {}

    def update(self, y_true: int, y_pred: int) -> None:
        wrong = int(y_true != y_pred)
        self.rounds += 1
        self.errors += wrong
        self._interval_errors += wrong
        self._predicted[y_pred] = self._predicted.get(y_pred, 0) + 1
        self._labels[y_true] = self._labels.get(y_true, 0) + 1
        if self.rounds % self.interval == 0:
            self._close_interval()

    def _close_interval(self) -> None:
        self.intervals.append(self._interval_errors / self.interval)
        self.top_shares.append(max(self._predicted.values()) / self.interval)
        self.label_shares.append(max(self._labels.values()) / self.interval)
        self._interval_errors = 0
        self._predicted, self._labels = {}, {}

    @staticmethod
    def _add_counts(counts: dict[int, int], values: np.ndarray) -> None:
        classes, n = np.unique(values, return_counts=True)
        for c, k in zip(classes.tolist(), n.tolist()):
            counts[c] = counts.get(c, 0) + k

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
        self._add_counts(self._predicted, np.asarray(y_pred))
        self._add_counts(self._labels, np.asarray(y_true))
        if self.rounds % self.interval == 0:
            self._close_interval()

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
            "top_shares": np.array([self.top_shares, self.label_shares], dtype=np.float64).reshape(2, -1),
            "open_counts": np.array(  # the unfinished interval's (class, count, 0: predicted / 1: label)
                [[c, k, 0] for c, k in self._predicted.items()]
                + [[c, k, 1] for c, k in self._labels.items()],
                dtype=np.int64).reshape(-1, 3),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.rounds, self.errors, self._interval_errors = (int(v) for v in state["counts"])
        self.intervals = [float(v) for v in state["intervals"]]
        if "top_shares" in state:
            self.top_shares, self.label_shares = ([float(v) for v in row] for row in state["top_shares"])
        else:  # a checkpoint from before the shares were recorded
            self.top_shares = [float("nan")] * len(self.intervals)
            self.label_shares = [float("nan")] * len(self.intervals)
        self._predicted, self._labels = {}, {}
        for c, k, which in state.get("open_counts", np.zeros((0, 3), np.int64)).tolist():
            (self._labels if which else self._predicted)[int(c)] = int(k)

    def collapse(self) -> dict:
        """The summary's fields of :func:`fedstream.metrics.collapse.collapse_fields` for the
        last complete interval (none before the first)."""
        if not self.top_shares:
            return {}
        return collapse_fields(self.top_shares[-1], self.label_shares[-1],
                               f"the last interval ({self.interval:,} rounds)")
