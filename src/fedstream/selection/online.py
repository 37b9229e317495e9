"""Selection as an activation policy of the online engine (beyond the paper).

In online VFL the data never stop changing, so instead of selecting once the server keeps an
online estimate of each client's MI with the label and talks only to the l best clients. The
others are neither activated nor queried: they send nothing and receive nothing, and the server's
top model gets their padding instead (:mod:`fedstream.selection.padding`: zero, running mean,
latest or EMA of what the client really sent). That is where the bytes drop: a passive client of
the paper's protocol still costs a query and an embedding every round, an unselected one costs
nothing.

Who is asked, round by round (:meth:`TopLActivation.mask`):

* every ``explore``-th round (absolute round t with t % explore == 0) is an *exploration round*:
  every client is activated, sends its embedding and learns from its gradient. These rounds are
  what keeps the estimate alive: without them the server would never again see an unselected
  client's embedding, and a client dropped once would stay dropped. They also keep unselected
  clients' models learning and their padding current. They cost (m - l) / (m * explore) of full
  traffic (e.g. 5 % of full for l = 2 of 4, explore = 10);
* until the first estimate exists (cold start), the other rounds activate l clients drawn
  uniformly per round, as ``fixed`` does;
* afterwards, the other rounds activate the l clients with the highest estimate.

:class:`OnlineMIEstimate` scores what the server really holds: the embedding rows of the last
``window`` rounds in which every client sent (:class:`ExplorationBuffer`). After each complete
chunk of the stream (``observe``, called by the engine) it runs VF-PS group testing (eq. (1) on the
buffered rows, the fast path of :mod:`fedstream.selection.knn_mi`) and blends the per-client
scores into an exponential moving average, so the estimate follows drift. Scoring needs no message
at all: the server computes the distances between embeddings it already received (unlike VF-PS
on raw features, where the clients would have to share local distances). Each client's block is
divided by its RMS before scoring, so that a client with large embeddings does not dominate the
group distances. A bias to keep in mind: selected clients learn in every round, unselected ones
only in exploration rounds, so the estimate favours the incumbents a little.

The policy is also the server's *stand-in* for the clients it does not query
(:class:`~fedstream.ovfl.server.Server` calls :meth:`TopLActivation.fill` and
:meth:`TopLActivation.received`); the buffer, the padding and the estimate are checkpointed with
the run, so a resumed run continues exactly. An unqueried client is not part of the round: its
optimiser does not advance (no zero enters a DLR window), only its input window (SLR) moves on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from fedstream.errors import ConfigError, DataError
from fedstream.selection.group_testing import DEFAULT_GROUPS, DEFAULT_K, group_test
from fedstream.selection.padding import PADDINGS, make_padding
from fedstream.selection.policy import Activation
from fedstream.selection.validation import (
    check_blocks,
    check_l,
    check_positive_int,
    check_probability,
)

EMA_ALPHA = 0.1  # ema padding: weight of the newest row (as selection.ema_alpha's default)


class OnlineMIEstimate:
    """Per-client MI scores from group testing on a window of rows, smoothed by an EMA over updates."""

    def __init__(
        self,
        n_clients: int,
        *,
        window: int = 500,
        k: int = DEFAULT_K,
        n_groups: int = DEFAULT_GROUPS,
        smoothing: float = 0.5,
        seed: int = 0,
    ):
        self.n_clients = check_positive_int("n_clients", n_clients)
        self.window = check_positive_int("window", window, minimum=2)
        self.k, self.n_groups = (
            check_positive_int("k", k),
            check_positive_int("n_groups", n_groups, minimum=0),
        )
        self.smoothing = check_probability("smoothing", smoothing, allow_zero=False)
        self.seed = int(seed)
        self.scores: np.ndarray | None = None  # (m,) once a window has been scored
        self.updates = 0

    def update(self, blocks: Sequence[np.ndarray], labels) -> np.ndarray | None:
        """Score the last ``window`` rows of ``blocks`` / ``labels`` and blend them in; the new scores.

        Classes with at most k rows in the window cannot be queries of eq. (1) and are left out;
        if fewer than 2 rows remain, nothing is scored and the estimate is unchanged.
        """
        blocks = [b[-self.window:] for b in check_blocks(blocks)]
        y = np.asarray(labels)[-self.window:]
        classes, counts = np.unique(y, return_counts=True)
        keep = np.isin(y, classes[counts > self.k])
        if keep.sum() < 2:
            return self.scores
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


class ExplorationBuffer:
    """A ring of the last ``window`` rounds in which every client sent: the server's input row
    (m embeddings side by side) and the label."""

    def __init__(self, n_clients: int, embedding: int, window: int):
        self.n_clients = check_positive_int("n_clients", n_clients)
        self.embedding = check_positive_int("embedding", embedding)
        self.window = check_positive_int("window", window, minimum=2)
        self.rows = np.zeros((self.window, self.n_clients * self.embedding), dtype=np.float32)
        self.labels = np.zeros(self.window, dtype=np.int64)
        self.count = 0  # rows pushed so far (the ring holds the last min(count, window))

    def push(self, row: np.ndarray, y: int) -> None:
        row = np.asarray(row)
        if row.shape != (self.rows.shape[1],):
            raise DataError(f"exploration row must have shape ({self.rows.shape[1]},) = clients x embedding, "
                            f"got {row.shape}")
        i = self.count % self.window
        self.rows[i], self.labels[i] = row, y
        self.count += 1

    @property
    def full(self) -> bool:
        return self.count >= self.window

    def blocks(self) -> tuple[list[np.ndarray], np.ndarray]:
        """Per-client blocks (oldest row first), each divided by its RMS around its mean, and the labels."""
        n = min(self.count, self.window)
        order = (np.arange(n) + (self.count - n)) % self.window
        rows, e = self.rows[order].astype(np.float64), self.embedding
        out = []
        for m in range(self.n_clients):
            b = rows[:, m * e:(m + 1) * e]
            rms = np.sqrt(((b - b.mean(axis=0)) ** 2).sum(axis=1).mean())
            out.append(b / rms if rms > 0 else b)
        return out, self.labels[order]


class TopLActivation(Activation):
    """Activate (and query) only the l clients with the best online MI estimate; explore every
    ``explore``-th round; pad the others at the server."""

    name = "topl"

    def __init__(self, n_clients: int, *, l: int, embedding: int, window: int = 500, explore: int = 10,
                 padding: str = "mean", k: int = DEFAULT_K, n_groups: int = DEFAULT_GROUPS,
                 smoothing: float = 0.5, seed: int = 0):
        super().__init__(n_clients, seed=seed)
        self.l = check_l(l, n_clients)
        self.explore = check_positive_int("explore (rounds between exploration rounds)", explore)
        if padding not in PADDINGS:
            raise ConfigError(f"padding must be one of {', '.join(map(repr, PADDINGS))}, got {padding!r}")
        self.padding = make_padding(
            padding, n_clients, embedding, **({"alpha": EMA_ALPHA} if padding == "ema" else {})
        )
        self.buffer = ExplorationBuffer(n_clients, embedding, window)
        self.estimate = OnlineMIEstimate(
            n_clients, window=window, k=k, n_groups=n_groups, smoothing=smoothing, seed=seed
        )
        self.seconds = 0.0  # spent scoring the buffer

    # -- who is asked ------------------------------------------------------------------------
    def mask(self, chunk: int, block_means: np.ndarray) -> np.ndarray:
        rounds = block_means.shape[0]
        if self.estimate.scores is None:  # cold start: l uniformly drawn clients per round
            ranks = self._rng(chunk).random(block_means.shape).argsort(axis=1).argsort(axis=1)
            mask = ranks < self.l
        else:
            mask = np.broadcast_to(self.estimate.top(self.l), block_means.shape).copy()
        t = chunk * rounds + np.arange(rounds)
        mask[t % self.explore == 0] = True  # exploration rounds: everyone sends and learns
        return mask

    def mask_among(self, chunk: int, block_means: np.ndarray, held: np.ndarray | None) -> np.ndarray:
        """As :meth:`mask`, with the l clients chosen among those that hold each round's id (all
        holders in exploration rounds)."""
        if held is None:
            return self.mask(chunk, block_means)
        rounds = block_means.shape[0]
        if self.estimate.scores is None:
            key = self._rng(chunk).random(block_means.shape)
        else:
            order = np.lexsort((np.arange(self.n_clients), -self.estimate.scores))
            key = np.broadcast_to(np.argsort(order) / self.n_clients, block_means.shape)
        ranks = np.where(held, key, 2.0).argsort(axis=1, kind="stable").argsort(axis=1)
        mask = ranks < self.l
        t = chunk * rounds + np.arange(rounds)
        mask[t % self.explore == 0] = True
        return mask & held

    def queried(self, mask: np.ndarray) -> np.ndarray:
        """Passive clients the server queries: none (the unselected are padded)."""
        return np.zeros_like(mask, dtype=bool)

    # -- the server's stand-in for unqueried clients -------------------------------------------
    def fill(self, client: int, rows: int) -> np.ndarray:
        """(rows, e) float32: the padding that replaces ``client``'s embedding this round."""
        return self.padding.fill(client, rows).astype(np.float32)

    def received(self, y: int, row: np.ndarray, real: np.ndarray) -> None:
        """A round's server input row (m embeddings of the current sample) and which were really sent:
        the real ones feed the padding; a round where all were real is buffered for the estimate."""
        self.padding.update_rows(row.reshape(self.n_clients, self.padding.dim), real)
        if real.all():
            self.buffer.push(row, y)

    def observe(self, blocks: Sequence[np.ndarray], labels) -> None:
        """After a complete chunk: re-score the clients on the buffered rounds, once the buffer is full.

        The chunk's features and labels (``blocks``, ``labels``) are not used: the server never sees
        features, and its labels of the buffered rounds are already in the buffer.
        """
        if not self.buffer.full:
            return
        tic = time.perf_counter()
        self.estimate.update(*self.buffer.blocks())
        self.seconds += time.perf_counter() - tic

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        scores = self.estimate.scores
        return {
            "scores": np.full(self.n_clients, np.nan)
            if scores is None
            else np.asarray(scores, dtype=np.float64),
            "has_scores": np.array(scores is not None),
            "updates": np.array(self.estimate.updates),
            "seconds": np.array(self.seconds),
            "buffer_rows": self.buffer.rows.copy(),
            "buffer_labels": self.buffer.labels.copy(),
            "buffer_count": np.array(self.buffer.count),
            "padding_value": self.padding.value.copy(),
            "padding_seen": self.padding.seen.copy(),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        if np.shape(state["buffer_rows"]) != self.buffer.rows.shape:
            raise DataError(
                f"topl buffer of shape {np.shape(state['buffer_rows'])}, expected {self.buffer.rows.shape}"
            )
        self.estimate.scores = (
            np.array(state["scores"], dtype=np.float64) if bool(state["has_scores"]) else None
        )
        self.estimate.updates = int(state["updates"])
        self.seconds = float(state["seconds"])
        self.buffer.rows[...], self.buffer.labels[...] = state["buffer_rows"], state["buffer_labels"]
        self.buffer.count = int(state["buffer_count"])
        self.padding.value[...], self.padding.seen[...] = state["padding_value"], state["padding_seen"]
