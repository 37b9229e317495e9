"""Validation-based model choice, per client (paper V-A3: "each client tunes hyperparameters such
as learning rate and μ of CHFL using their own validation dataset").

For every client and every (learning rate, candidate) pair, :class:`Selector` keeps the round
with the best validation accuracy (the earliest on ties) and, with it, a snapshot of the weights
of that round; a client's choice is then the pair with the best validation accuracy. Only the
chosen snapshots are scored on the test rows, at the end: the test set never takes part in a
choice.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from fedstream.metrics.collapse import collapse_fields, most_collapsed


@dataclass(frozen=True)
class Choice:
    lr: float
    candidate: str
    round: int
    val_acc: float
    test_acc: float = math.nan  # filled in once chosen
    top_class_share: float = math.nan  # of its test predictions (fedstream.metrics.collapse), once chosen
    label_top_class_share: float = math.nan  # of the test labels


class Selector:
    """Best validation round per (client, lr, candidate), and the per-client choice among them."""

    def __init__(self) -> None:
        self.best: dict[tuple[int, float, str], Choice] = {}
        self.snapshots: dict[tuple[int, float, str], Any] = {}

    def improves(self, client: int, lr: float, candidate: str, val_acc: float) -> bool:
        """True when ``val_acc`` beats the kept record (the caller then :meth:`keep`s it)."""
        old = self.best.get((client, lr, candidate))
        return old is None or val_acc > old.val_acc

    def keep(self, client: int, choice: Choice, snapshot: Any = None) -> None:
        key = (client, choice.lr, choice.candidate)
        self.best[key] = choice
        self.snapshots[key] = snapshot

    def choose(self, client: int, allowed: Callable[[str], bool] = lambda c: True) -> Choice:
        """The kept record of ``client`` with the best validation accuracy among allowed candidates.

        Ties go to the first kept (learning rates in the order tried, candidates in their order).
        """
        pool = [c for (k, _, cand), c in self.best.items() if k == client and allowed(cand)]
        if not pool:
            raise ValueError(f"client {client}: no evaluated candidate to choose from")
        return max(pool, key=lambda c: c.val_acc)


def summarize(choices: list[Choice]) -> dict:
    """Mean test accuracy over clients plus each client's choice."""
    accs = [c.test_acc for c in choices]
    return {"test_acc": sum(accs) / len(accs), "test_acc_per_client": accs,
            "choices": [asdict(c) for c in choices]} | collapse_of(choices)


def collapse_of(choices: list[Choice]) -> dict:
    """The collapse fields (:func:`fedstream.metrics.collapse.collapse_fields`) of the client
    whose chosen model's test predictions are most one class: the run ends collapsed when any
    client's model does."""
    k = most_collapsed([(c.top_class_share, c.label_top_class_share) for c in choices])
    if k is None:
        return {}
    worst = choices[k]
    return collapse_fields(worst.top_class_share, worst.label_top_class_share,
                           f"client {k}'s test rows (its chosen model, {worst.candidate})")
