"""How CHFL experiments divide a table among clients: features (common/unique) and rows.

Features (paper section V-A3): a ratio ``r`` of the features, drawn at random, is common to all
clients; the rest is divided evenly among the K clients as their unique features (sizes differ
by at most one). Table IV instead picks the common set whose summed correlation with the
remaining features is the largest, the median or the smallest over all ways of choosing it
(section V-B4); the unique features are then dealt out at random as before.

Rows: 60 % train, 20 % validation, 20 % test, drawn at random; train and validation rows are
dealt evenly to the clients (disjoint sample IDs, eq. 5). Every client is tested on the whole
test set, seen through its own features: the clients' data come from one distribution, and one
shared test set gives every client's accuracy the same, lower, sampling noise.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedstream.errors import ConfigError

SPLIT_KINDS = ("random", "max-corr", "median-corr", "min-corr")
FRACTIONS = (0.6, 0.2, 0.2)
MAX_ENUMERATE = 3_000_000  # exhaustive search over common sets up to this many; else sampling
N_SAMPLED = 100_000


class SettingError(ConfigError):
    """A bad CHFL setting, naming its field; :meth:`named` renames fields to config keys.

    ``detail`` may name other fields as ``{field}`` placeholders, so that a message such as
    "lower {common_ratio} or {clients}" reads in the caller's vocabulary.
    """

    def __init__(self, field: str, detail: str, names: Mapping[str, str] | None = None):
        self.field, self.detail = field, detail
        names = names or {}
        text = detail.format_map(_Names(names))
        super().__init__(f"{names.get(field, field)}: {text}")

    def named(self, names: Mapping[str, str]) -> SettingError:
        """The same error with fields renamed by ``names`` (field -> config key)."""
        return SettingError(self.field, self.detail, names)


class _Names(dict):
    """format_map helper: ``{field}`` -> its name in ``names``, else the field itself."""

    def __init__(self, names: Mapping[str, str]):
        super().__init__(names)

    def __missing__(self, key: str) -> str:
        return key


@dataclass(frozen=True)
class FeatureSplit:
    """Column indices: ``common`` (shared by all clients) and each client's ``unique`` ones."""

    common: np.ndarray
    unique: tuple[np.ndarray, ...]

    @property
    def n_clients(self) -> int:
        return len(self.unique)

    def own(self, client: int) -> np.ndarray:
        """All the columns client ``client`` holds: common, then unique (the Local baseline's input)."""
        return np.concatenate([self.common, self.unique[client]])


@dataclass(frozen=True)
class RowSplit:
    """Row indices: each client's train and validation rows, and the shared test rows."""

    train: tuple[np.ndarray, ...]
    val: tuple[np.ndarray, ...]
    test: np.ndarray


def n_common_features(n_features: int, n_clients: int, ratio: float) -> int:
    """``round(ratio * d)``, at least 1 and leaving every client at least one unique feature."""
    if not 0.0 < ratio < 1.0:
        raise SettingError("common_ratio", f"expected a number strictly between 0 and 1, found {ratio}")
    c = max(1, round(ratio * n_features))
    if n_features - c < n_clients:
        raise SettingError(
            "common_ratio",
            f"{ratio} leaves {n_features - c} of {n_features} features for {{clients}} = {n_clients}: "
            f"expected at least one unique feature per client (lower {{common_ratio}} or {{clients}})")
    return c


def _deal(rest: np.ndarray, n_clients: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    """Deal the non-common features at random into ``n_clients`` near-equal parts."""
    parts = np.array_split(rng.permutation(rest), n_clients)
    return tuple(np.sort(p) for p in parts)


def random_split(n_features: int, n_clients: int, *, ratio: float = 0.3, seed: int = 0) -> FeatureSplit:
    """Random common features (ratio ``ratio``), the rest dealt evenly (paper V-A3)."""
    c = n_common_features(n_features, n_clients, ratio)
    rng = np.random.default_rng([seed, 1])
    perm = rng.permutation(n_features)
    return FeatureSplit(np.sort(perm[:c]), _deal(perm[c:], n_clients, rng))


def abs_correlation(X: np.ndarray) -> np.ndarray:
    """|Pearson correlation| between columns, 0 for constant columns and on the diagonal."""
    X = np.asarray(X, dtype=np.float64)
    std = X.std(axis=0)
    Z = (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)
    R = np.abs(Z.T @ Z / X.shape[0])
    R[:, std == 0] = 0.0
    R[std == 0, :] = 0.0
    np.fill_diagonal(R, 0.0)
    return R


def cross_scores(R: np.ndarray, subsets: np.ndarray) -> np.ndarray:
    """For each row of ``subsets`` (common sets), the sum of R[i, j] over i in it, j outside it.

    Computed as sum_{i in C} rowsum_i - sum_{i, j in C} R_ij (R has a zero diagonal).
    """
    inner = R[subsets[:, :, None], subsets[:, None, :]].sum(axis=(1, 2))
    return R.sum(axis=1)[subsets].sum(axis=1) - inner


def _candidates(d: int, c: int, rng: np.random.Generator) -> np.ndarray:
    """Every common set of size c when there are at most MAX_ENUMERATE, else N_SAMPLED random ones."""
    if math.comb(d, c) <= MAX_ENUMERATE:
        flat = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(d), c)),
                           dtype=np.int16, count=math.comb(d, c) * c)
        return flat.reshape(-1, c)
    return np.sort(rng.random((N_SAMPLED, d)).argsort(axis=1)[:, :c], axis=1).astype(np.int16)


def correlation_split(X: np.ndarray, n_clients: int, *, ratio: float = 0.3, which: str = "max",
                      seed: int = 0) -> FeatureSplit:
    """The common set whose summed |correlation| with the other features is max/median/min.

    Paper V-B4 (Table IV): the score of a common set C is sum_{i in C, j not in C} |corr(x_i, x_j)|
    (the paper does not say whether signs are kept; absolute values measure the strength of the
    dependence, which is what the section studies). All C(d, c) sets are scored when there are at
    most MAX_ENUMERATE (helena: C(27, 8) = 2.2M), otherwise N_SAMPLED random ones.
    """
    if which not in ("max", "median", "min"):
        raise SettingError("split", f"expected one of max, median, min (-corr), found {which!r}")
    d = X.shape[1]
    c = n_common_features(d, n_clients, ratio)
    rng = np.random.default_rng([seed, 2])
    R = abs_correlation(X)
    subsets = _candidates(d, c, rng)
    scores = np.concatenate([cross_scores(R, subsets[i:i + 200_000].astype(np.intp))
                             for i in range(0, len(subsets), 200_000)])
    order = np.argsort(scores, kind="stable")
    pick = {"min": order[0], "max": order[-1], "median": order[len(order) // 2]}[which]
    common = np.sort(subsets[pick].astype(np.intp))
    rest = np.setdiff1d(np.arange(d), common)
    return FeatureSplit(common, _deal(rest, n_clients, rng))


def feature_split(kind: str, X: np.ndarray, n_clients: int, *, ratio: float, seed: int) -> FeatureSplit:
    """Dispatch on ``kind`` (one of SPLIT_KINDS)."""
    if kind == "random":
        return random_split(X.shape[1], n_clients, ratio=ratio, seed=seed)
    if kind.endswith("-corr") and kind in SPLIT_KINDS:
        return correlation_split(X, n_clients, ratio=ratio, which=kind.split("-")[0], seed=seed)
    raise SettingError("split", f"expected one of {', '.join(SPLIT_KINDS)}, found {kind!r}")


def split_rows(n_rows: int, n_clients: int, *, seed: int,
               fractions: tuple[float, float, float] = FRACTIONS) -> RowSplit:
    """Random train/validation/test rows; train and validation dealt evenly to the clients."""
    n_train = round(fractions[0] * n_rows)
    n_val = round(fractions[1] * n_rows)
    if n_train < n_clients or n_val < n_clients or n_rows - n_train - n_val < 1:
        raise SettingError(
            "clients",
            f"{n_rows} rows are too few for {n_clients} clients (rows: the "
            f"dataset's, or {{max_rows}}): expected at least one train and one validation row per client "
            f"and one test row",
        )
    perm = np.random.default_rng([seed, 3]).permutation(n_rows)
    train = tuple(np.sort(p) for p in np.array_split(perm[:n_train], n_clients))
    val = tuple(np.sort(p) for p in np.array_split(perm[n_train:n_train + n_val], n_clients))
    return RowSplit(train, val, np.sort(perm[n_train + n_val:]))
