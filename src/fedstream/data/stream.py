"""The per-round sample stream: which source index each round of an online run sees.

A :class:`Stream` is stateless: round ``t`` always gets the same sample whatever ``t0``/``n`` the
caller uses to fetch it, so a run can resume at any round and be cut into chunks freely. All
randomness comes from generators keyed by ``seed`` and a fixed-size block of rounds, never from a
generator that advances with the calls.

Drift modes:

* ``"none"``: round t -> source index t (sequential; for i-MNIST every round is a new deformation,
  and the labels follow the base set in order).
* ``"class-prior"``: rounds are grouped into blocks of ``drift_every``; block b has class
  probabilities ``p_b = u / sum(u)`` with ``u ~ U(0, 1)^n_classes`` from
  ``default_rng([seed, 1, b])`` (classes with no base item get probability 0). Round t draws a
  class from ``p_{t // drift_every}`` and a base item ``a`` uniformly among that class's items,
  with two uniforms taken from ``default_rng([seed, 2, t // RNG_CHUNK])`` (the whole chunk's
  uniforms are generated, then sliced). The source index is ``i = a + n_base * t``: unique per
  round, so i-MNIST never repeats a deformation, and ``i mod n_base = a``.
"""

from __future__ import annotations

import numpy as np

from fedstream.data.sources import Source

DRIFTS = ("none", "class-prior")
RNG_CHUNK = 4096  # rounds per random chunk (fixed: changing it changes every class-prior stream)
_INT64_MAX = np.iinfo(np.int64).max


class Stream:
    """Deterministic per-round samples of ``source`` (see module doc)."""

    def __init__(self, source: Source, *, drift: str = "none", drift_every: int = 50,
                 seed: int = 0) -> None:
        if drift not in DRIFTS:
            raise ValueError(f"drift: expected one of {', '.join(DRIFTS)}, found {drift!r}")
        if isinstance(drift_every, bool) or not isinstance(drift_every, (int, np.integer)) \
                or drift_every < 1:
            raise ValueError(f"drift_every: expected an integer >= 1, found {drift_every!r}")
        self.source = source
        self.drift = drift
        self.drift_every = int(drift_every)
        self.seed = int(seed)
        self.n_features = source.n_features
        self.n_classes = source.n_classes
        labels = np.asarray(source.base_labels, dtype=np.int64)
        if labels.size and (labels.min() < 0 or labels.max() >= self.n_classes):
            raise ValueError(f"source.base_labels: expected labels in 0..{self.n_classes - 1}, "
                             f"found {labels.min()}..{labels.max()}")
        self._counts = np.bincount(labels, minlength=self.n_classes)
        self._order = np.argsort(labels, kind="stable")  # base items grouped by class
        self._offsets = np.concatenate(([0], np.cumsum(self._counts)[:-1]))
        self._cdf_cache: dict[int, np.ndarray] = {}

    # --- class-prior helpers ---------------------------------------------------------------

    def _block_probabilities(self, b: int) -> np.ndarray:
        p = np.random.default_rng([self.seed, 1, int(b)]).random(self.n_classes)
        p[self._counts == 0] = 0.0
        return p / p.sum()

    def _block_cdf(self, b: int) -> np.ndarray:
        cdf = self._cdf_cache.get(b)
        if cdf is None:
            cdf = np.cumsum(self._block_probabilities(b))
            cdf[-1] = 1.0  # exact, so that u < 1 always picks a class
            if len(self._cdf_cache) > 4096:
                self._cdf_cache.clear()
            self._cdf_cache[b] = cdf
        return cdf

    def class_probabilities(self, t: int) -> np.ndarray:
        """Class probabilities (float64, n_classes) of round t.

        For ``drift="none"`` these are the base set's class frequencies (the stream walks the base
        set in order).
        """
        if t < 0:
            raise ValueError(f"t: expected a round >= 0, found {t}")
        if self.drift == "none":
            return self._counts / self._counts.sum()
        return self._block_probabilities(int(t) // self.drift_every)

    def _uniforms(self, t0: int, n: int) -> np.ndarray:
        """float64 (n, 2) uniforms of rounds t0..t0+n-1, independent of the chunking."""
        out = np.empty((n, 2))
        first, last = t0 // RNG_CHUNK, (t0 + n - 1) // RNG_CHUNK
        for c in range(first, last + 1):
            u = np.random.default_rng([self.seed, 2, c]).random((RNG_CHUNK, 2))
            lo, hi = max(t0, c * RNG_CHUNK), min(t0 + n, (c + 1) * RNG_CHUNK)
            out[lo - t0 : hi - t0] = u[lo - c * RNG_CHUNK : hi - c * RNG_CHUNK]
        return out

    # --- public ------------------------------------------------------------------------------

    def indices(self, t0: int, n: int) -> np.ndarray:
        """int64 source indices of rounds t0..t0+n-1 (cheap: no features computed)."""
        if isinstance(t0, bool) or not isinstance(t0, (int, np.integer)) or t0 < 0:
            raise ValueError(f"t0: expected an integer round >= 0, found {t0!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n: expected an integer count >= 0, found {n!r}")
        t0, n = int(t0), int(n)
        if n == 0:
            return np.zeros(0, np.int64)
        n_base = self.source.n_base
        if (t0 + n) > _INT64_MAX // max(n_base, 1) - 1:
            raise ValueError(f"t0 + n: rounds up to {t0 + n} overflow int64 source indices "
                             f"(n_base = {n_base})")
        t = np.arange(t0, t0 + n, dtype=np.int64)
        if self.drift == "none":
            return t
        u = self._uniforms(t0, n)
        blocks = t // self.drift_every
        ub, inv = np.unique(blocks, return_inverse=True)  # one entry per block, not per round
        cdfs = np.stack([self._block_cdf(int(b)) for b in ub])
        cls = (cdfs[inv] <= u[:, :1]).sum(axis=1)
        cnt = self._counts[cls]
        k = np.minimum((u[:, 1] * cnt).astype(np.int64), cnt - 1)
        a = self._order[self._offsets[cls] + k]
        return a + n_base * t

    def batch(self, t0: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rounds t0..t0+n-1: X float32 (n, n_features), y int64 (n,), source indices int64 (n,)."""
        idx = self.indices(t0, n)
        X = np.asarray(self.source.features(idx), dtype=np.float32)
        y = np.asarray(self.source.labels(idx), dtype=np.int64)
        return X, y, idx
