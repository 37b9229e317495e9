"""Selection as an activation policy of the online engine (beyond the paper).

In online VFL the data never stop changing, so instead of selecting once the server keeps an
online estimate of each client's MI with the label and activates only the l best clients. The
others are passive clients of the online protocol (queried for their embedding, no gradient back,
no update); replacing their embeddings by padding (:mod:`fedstream.selection.padding`) instead of
querying them would need a protocol variant the engine does not have yet.

* :class:`OnlineMIEstimate` — every time a window of recent rounds is complete, VF-PS group testing
  (eq. (1), the fast path of :mod:`fedstream.selection.knn_mi`) scores the clients on that window —
  the clients share local distances between the window's samples, as in VF-PS — and the per-client
  scores are blended into an exponential moving average, so the estimate follows drift.
* :class:`TopLActivation` — an :class:`~fedstream.vfl.activation.Activation` whose mask activates
  the l clients with the highest current estimate in every round of a chunk (until the first
  estimate exists, l clients drawn uniformly per round, as ``fixed`` does: exactly l in every round).

The online engine feeds it (``activation.name = "topl"``, ``activation.l``, ``activation.window``):
after each complete chunk, ``policy.observe(blocks, labels)`` with the chunk's per-client feature
blocks and labels (the last ``window`` rounds are used). The estimate is checkpointed with the run.
Its cost is reported apart from the training traffic: ``seconds`` spent scoring and
``distance_bytes``, the float32 local distances every client would send for a window
(w(w - 1)/2 pairs each), counted analytically.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from fedstream.selection.group_testing import DEFAULT_GROUPS, DEFAULT_K, group_test
from fedstream.selection.validation import check_blocks, check_l, check_positive_int, check_probability
from fedstream.vfl.activation import Activation


class OnlineMIEstimate:
    """Per-client MI scores from group testing on sliding windows, smoothed by an EMA."""

    def __init__(self, n_clients: int, *, window: int = 2000, k: int = DEFAULT_K, n_groups: int = DEFAULT_GROUPS,
                 smoothing: float = 0.5, seed: int = 0):
        self.n_clients = check_positive_int("n_clients", n_clients)
        self.window = check_positive_int("window", window, minimum=2)
        self.k, self.n_groups = check_positive_int("k", k), check_positive_int("n_groups", n_groups, minimum=0)
        self.smoothing = check_probability("smoothing", smoothing, allow_zero=False)
        self.seed = int(seed)
        self.scores: np.ndarray | None = None  # (m,) once a window has been scored
        self.updates = 0

    def update(self, blocks: Sequence[np.ndarray], labels) -> np.ndarray:
        """Score the last ``window`` samples of ``blocks`` / ``labels`` and blend them in; the new scores."""
        blocks = [b[-self.window:] for b in check_blocks(blocks)]
        y = np.asarray(labels)[-self.window:]
        classes, counts = np.unique(y, return_counts=True)
        keep = np.isin(y, classes[counts > self.k])  # classes too rare in this window cannot be queried
        # averaged, not summed: groups are redrawn at every update, and a utility blended over
        # updates must not depend on how often a client happened to be drawn this time
        res = group_test([b[keep] for b in blocks], y[keep], n_groups=self.n_groups, k=self.k,
                         seed=self.seed + self.updates, aggregate="mean")
        fresh = np.nan_to_num(res.client_scores, nan=0.0)
        a = self.smoothing
        self.scores = fresh if self.scores is None else (1 - a) * self.scores + a * fresh
        self.updates += 1
        return self.scores

    def top(self, l: int) -> np.ndarray:
        """(m,) bool: the l clients with the highest estimate (ties by lower index); all before any update."""
        l = check_l(l, self.n_clients)
        mask = np.zeros(self.n_clients, dtype=bool)
        if self.scores is None:
            mask[:] = True
        else:
            mask[np.lexsort((np.arange(self.n_clients), -self.scores))[:l]] = True
        return mask


class TopLActivation(Activation):
    """Activate the l clients with the best online MI estimate in every round."""

    name = "topl"

    def __init__(self, n_clients: int, *, l: int, window: int = 2000, k: int = DEFAULT_K,
                 n_groups: int = DEFAULT_GROUPS, smoothing: float = 0.5, seed: int = 0):
        super().__init__(n_clients, seed=seed)
        self.l = check_l(l, n_clients)
        self.estimate = OnlineMIEstimate(n_clients, window=window, k=k, n_groups=n_groups, smoothing=smoothing,
                                         seed=seed)
        self.seconds = 0.0  # spent scoring windows
        self.distance_bytes = 0  # float32 local distances the clients would send for the windows scored

    def mask(self, chunk: int, block_means: np.ndarray) -> np.ndarray:
        if self.estimate.scores is None:  # cold start: l uniformly drawn clients per round
            ranks = self._rng(chunk).random(block_means.shape).argsort(axis=1).argsort(axis=1)
            return ranks < self.l
        return np.broadcast_to(self.estimate.top(self.l), block_means.shape).copy()

    def observe(self, blocks: Sequence[np.ndarray], labels) -> None:
        """Feed the rounds just played (per-client blocks and labels); the next chunk uses the new estimate."""
        tic = time.perf_counter()
        self.estimate.update(blocks, labels)
        self.seconds += time.perf_counter() - tic
        n = min(self.estimate.window, len(labels))
        self.distance_bytes += self.n_clients * (n * (n - 1) // 2) * 4

    def state_dict(self) -> dict[str, np.ndarray]:
        scores = self.estimate.scores
        return {"scores": np.full(self.n_clients, np.nan) if scores is None else np.asarray(scores, dtype=np.float64),
                "has_scores": np.array(scores is not None), "updates": np.array(self.estimate.updates),
                "seconds": np.array(self.seconds), "distance_bytes": np.array(self.distance_bytes, dtype=np.int64)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.estimate.scores = np.array(state["scores"], dtype=np.float64) if bool(state["has_scores"]) else None
        self.estimate.updates = int(state["updates"])
        self.seconds, self.distance_bytes = float(state["seconds"]), int(state["distance_bytes"])
