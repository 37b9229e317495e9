"""Checks at the public boundary of the selection package.

Each check returns the cleaned value or raises :class:`~fedstream.errors.ConfigError` (a bad
argument) / :class:`~fedstream.errors.DataError` (bad data), naming the argument, what was expected,
what arrived and how to fix it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstream.errors import ConfigError, DataError
from fedstream.selection.digamma import check_psi


def check_blocks(blocks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per-client feature blocks: a non-empty list of finite 2-D arrays with the same row count."""
    if isinstance(blocks, np.ndarray) or not isinstance(blocks, Sequence) or len(blocks) == 0:
        raise DataError("blocks must be a non-empty list of per-client 2-D arrays (one per client), "
                        f"got {type(blocks).__name__}")
    out = []
    for j, b in enumerate(blocks):
        a = np.asarray(b)
        if a.ndim != 2:
            raise DataError(f"blocks[{j}] must be 2-D (samples, features), got shape {a.shape}; "
                            "reshape a 1-D block with x.reshape(-1, 1)")
        if a.shape[1] == 0:
            raise DataError(f"blocks[{j}] has no feature columns; expected at least 1")
        if not (np.issubdtype(a.dtype, np.number) and not np.issubdtype(a.dtype, np.complexfloating)):
            raise DataError(f"blocks[{j}] must hold real numbers, got dtype {a.dtype}")
        if a.shape[0] != np.asarray(blocks[0]).shape[0]:
            raise DataError(
                f"blocks[{j}] has {a.shape[0]} rows but blocks[0] has {np.asarray(blocks[0]).shape[0]}; "
                "every client must hold the same (aligned) samples"
            )
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
            raise DataError(f"blocks[{j}] holds NaN or infinite values; expected finite features")
        out.append(a)
    if out[0].shape[0] < 2:
        raise DataError(f"need at least 2 samples, got {out[0].shape[0]}")
    return out


def check_labels(labels, n: int) -> np.ndarray:
    """Integer class labels of length ``n``, returned as codes 0..C-1 (int64)."""
    y = np.asarray(labels)
    if y.ndim != 1 or y.shape[0] != n:
        raise DataError(f"labels must be 1-D with one label per sample ({n}), got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"labels must be integer class ids, got dtype {y.dtype}; encode them first "
                        "(e.g. np.unique(labels, return_inverse=True)[1])")
    return np.unique(y, return_inverse=True)[1].astype(np.int64)


def check_groups(groups, m: int) -> list[tuple[int, ...]]:
    """Groups of clients: non-empty, duplicate-free tuples of indices in 0..m-1 (returned sorted)."""
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence) or len(groups) == 0:
        raise ConfigError(f"groups must be a non-empty list of client-index tuples, got {groups!r}")
    out = []
    for i, g in enumerate(groups):
        members = tuple(int(c) for c in g)
        if not members:
            raise ConfigError(
                f"groups[{i}] is empty; expected a non-empty tuple of client indices in 0..{m - 1}"
            )
        bad = [c for c in members if not 0 <= c < m]
        if bad:
            raise ConfigError(
                f"groups[{i}] = {members} names client {bad[0]}; expected indices in 0..{m - 1}"
            )
        if len(set(members)) != len(members):
            raise ConfigError(f"groups[{i}] = {members} repeats a client; expected distinct indices")
        out.append(tuple(sorted(members)))
    return out


def check_queries(queries, n: int) -> np.ndarray:
    """Query sample indices: None (all n samples) or unique indices in 0..n-1, returned sorted int64."""
    if queries is None:
        return np.arange(n, dtype=np.int64)
    q = np.asarray(queries)
    if q.ndim != 1 or q.size == 0 or not np.issubdtype(q.dtype, np.integer):
        raise ConfigError("queries must be None or a non-empty 1-D array of sample indices, "
                          f"got {q.dtype} shape {q.shape}")
    if q.min() < 0 or q.max() >= n:
        raise ConfigError(f"queries must index samples 0..{n - 1}, got values {int(q.min())}..{int(q.max())}")
    u = np.unique(q)
    if u.size != q.size:
        raise ConfigError("queries holds repeated indices; expected each query sample once")
    return u.astype(np.int64)


def check_k(k, y: np.ndarray, queries: np.ndarray) -> int:
    """K of eq. (1): 1 <= K < size of every class that has a query (the query itself is left out)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"k (neighbours per query) must be an integer >= 1, got {k!r}")
    counts = np.bincount(y)
    queried = np.unique(y[queries])
    small = queried[counts[queried] <= k]
    if small.size:
        c = int(small[0])
        raise ConfigError(
            f"k={k} must be smaller than every queried class's size: class code {c} has "
            f"{int(counts[c])} samples, so it has only {int(counts[c]) - 1} neighbours besides the "
            f"query; use k <= {int(counts[queried].min()) - 1} or drop that class's queries"
        )
    return int(k)


def check_l(l, m: int) -> int:
    """Number of clients to select: 1 <= l <= m."""
    if isinstance(l, bool) or not isinstance(l, (int, np.integer)):
        raise ConfigError(f"l (clients to select) must be an integer, got {l!r}")
    if not 1 <= l <= m:
        raise ConfigError(f"l={l} clients cannot be selected from m={m}; expected 1 <= l <= {m}")
    return int(l)


def check_positive_int(name: str, value, *, minimum: int = 1) -> int:
    """An integer >= ``minimum``, else ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_probability(name: str, value, *, allow_zero: bool = True) -> float:
    """A float in [0, 1] (or (0, 1] without ``allow_zero``), else ConfigError naming ``name``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number in [0, 1], got {value!r}") from None
    lo_ok = v >= 0.0 if allow_zero else v > 0.0
    if not (lo_ok and v <= 1.0):
        raise ConfigError(f"{name} must be in {'[' if allow_zero else '('}0, 1], got {value!r}")
    return v


def check_group_inputs(blocks, labels, group, k, queries, psi: str):
    """The checked inputs of one group's eq. (1) score: ``(blocks, y, group, queries, k)``."""
    blocks = check_blocks(blocks)
    y = check_labels(labels, blocks[0].shape[0])
    (group,) = check_groups([group], len(blocks))
    q = check_queries(queries, y.shape[0])
    k = check_k(k, y, q)
    check_psi(psi)
    return blocks, y, group, q, k
