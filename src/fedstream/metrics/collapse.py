"""A run that ends predicting one class: the rule, and what a summary says about it.

A model can collapse onto one class (too high a learning rate, a stream it cannot follow): it
then predicts that class for every input, and its error only rises to the level of a constant
prediction, so neither a NaN nor the error alone shows it. Every task records, per evaluation
(an online interval, a batch epoch, a CHFL evaluation), the **top-class share**: the share of
its predictions that went to its most-predicted class.

A run **ends collapsed** when, at its last evaluation,

* the top-class share of its predictions is at least :data:`COLLAPSED` (0.99), and
* the labels of the same predictions are not that skewed: their own top-class share (the most
  frequent true class) is below :data:`SKEWED` (0.95).

(On a stream that is 99 % one class, predicting that class is no collapse.) The summary then has
``collapsed: true`` and a warning in ``warnings``, and ``fedstream run`` prints the warning.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

COLLAPSED = 0.99  # the top-class share of the predictions from which a run counts as collapsed
SKEWED = 0.95  # ... unless the labels' own top-class share is at least this


def top_share(values: Iterable[int] | np.ndarray) -> float:
    """The share of the most frequent value (NaN for none)."""
    values = np.asarray(values).ravel()
    if values.size == 0:
        return float("nan")
    _, counts = np.unique(values, return_counts=True)
    return float(counts.max() / values.size)


def count_share(counts: np.ndarray) -> float:
    """The share of the largest of ``counts`` (per class) in their sum (NaN for none): the
    :func:`top_share` of values given as their counts."""
    counts = np.asarray(counts)
    total = counts.sum()
    return float(counts.max() / total) if total > 0 else float("nan")


def most_collapsed(pairs: Sequence[tuple[float, float]]) -> int | None:
    """Of several models' (predicted share, label share) pairs (a federation's clients), the index of
    the one whose predictions are most one class beyond their labels' skew: the run ends collapsed
    when that one does. Pairs with a NaN predicted share are skipped; None when none is left."""
    known = [k for k, (top, _) in enumerate(pairs) if top == top]
    if not known:
        return None
    return max(known, key=lambda k: pairs[k][0] - pairs[k][1])


def is_collapsed(predicted_share: float, label_share: float) -> bool:
    """The rule of the module docstring (NaN shares: not collapsed)."""
    return bool(predicted_share >= COLLAPSED and label_share < SKEWED)


def collapse_fields(predicted_share: float, label_share: float, where: str) -> dict:
    """What a summary adds: the last evaluation's ``top_class_share`` and the labels' share
    (``label_top_class_share``), and when the run ends collapsed, ``collapsed: true`` and a
    warning naming ``where`` (e.g. "the last interval (1,000 rounds)")."""
    out = {"top_class_share": predicted_share, "label_top_class_share": label_share}
    if is_collapsed(predicted_share, label_share):
        out["collapsed"] = True
        out["warnings"] = [
            f"the run ended collapsed: {predicted_share:.1%} of the predictions on {where} are one class, "
            f"while the labels' most frequent class is {label_share:.1%} of them (the model predicts a "
            "constant: try a smaller learning rate, or check that the features carry the labels)"
        ]
    return out
