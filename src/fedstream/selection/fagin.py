"""The Fagin-inspired VF-PS variant: exact global K nearest neighbours from per-client sorted lists.

Each client sorts the candidates by its *local* squared distance to the query and reveals its list
only as far as the server reads it (sorted access); the server may also ask a client for the local
distance of one named candidate (random access). With the global distance the sum of the local
ones (a monotone aggregate), the server finds the exact global K nearest while reading as few list
entries as the data allow:

* :func:`threshold_knn` — Fagin's *threshold algorithm* (TA): read the lists in parallel, a slice of
  ``batch`` entries at a time, fetch every newly seen id's exact distance by random access, and
  stop once the K-th best exact distance is below the threshold τ = Σ_j (last value read in list
  j), a lower bound on the distance of every unseen id;
* :func:`fagin_knn` — *Fagin's algorithm* (FA), as in the VF-PS reference: read slices (100 entries
  by default) until K ids have appeared in every list, then rank all ids seen by exact distance;
* :func:`fagin_m` — what eq. (1) needs: TA run as a ranked enumeration until K neighbours of the
  query's class have come out (and, for a zero radius, every candidate at distance 0), giving m_q
  and the number of entries read.

The cost of the method is the number of list entries read (``sorted_reads``), plus the random
accesses; both are returned so they can be compared with the m·(n−1) a full scan reads.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fedstream.errors import ConfigError, DataError
from fedstream.selection.digamma import (
    psi as digamma,  # the parameter name psi is the ψ variant
)
from fedstream.selection.reference import local_sq_distances
from fedstream.selection.validation import check_group_inputs, check_positive_int


@dataclass(frozen=True)
class FaginResult:
    """Neighbours found and what finding them cost."""

    ids: np.ndarray  # (K,) candidate ids, nearest first (ties by lower id)
    distances: np.ndarray  # (K,) their global squared distances
    sorted_reads: int  # list entries read by sorted access, over all lists
    random_reads: int  # local distances fetched by random access
    depth: int  # entries read from each list


def check_local(local, exclude: int | None) -> np.ndarray:
    """(m, n) array of the group's local squared distances from the query to every candidate."""
    a = np.asarray(local, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise DataError(f"local distances must be a 2-D (clients, candidates) array, got shape {a.shape}")
    if not np.isfinite(a).all() or (a < 0).any():
        raise DataError("local distances must be finite and non-negative (squared Euclidean distances)")
    if exclude is not None and not 0 <= exclude < a.shape[1]:
        raise ConfigError(f"exclude must be a candidate index in 0..{a.shape[1] - 1}, got {exclude}")
    return a


def client_sorted_lists(local: np.ndarray, exclude: int | None = None) -> np.ndarray:
    """Each client's candidate ids in increasing local distance (ties by id), ``exclude`` removed.

    This is the only thing a client reveals, and only as deep as the server reads it.
    """
    order = np.argsort(local, axis=1, kind="stable")
    if exclude is not None:
        order = order[order != exclude].reshape(local.shape[0], -1)
    return order


def _top_k(ids: np.ndarray, dist: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    pick = np.lexsort((ids, dist))[:k]
    return ids[pick], dist[pick]


def _prepare(local, k: int, exclude: int | None, batch: int):
    """Checked inputs of a top-k search and each client's candidate list, sorted by local distance."""
    local = check_local(local, exclude)
    batch = check_positive_int("batch", batch)
    lists = client_sorted_lists(local, exclude)
    k = check_positive_int("k", k)
    if k > lists.shape[1]:
        raise ConfigError(f"k={k} exceeds the {lists.shape[1]} candidates; expected k <= {lists.shape[1]}")
    return local, lists, k, batch


def _read_step(local: np.ndarray, lists: np.ndarray, depth: int, batch: int, seen: np.ndarray):
    """One step of sorted access: the next ``batch`` entries of every client's list. Returns the ids
    not seen before (marked seen now), their global distances (one random access to each other
    list per id), the new depth and τ, the global distance of the last row read (inf at the end)."""
    m, n_cand = lists.shape
    stop = min(n_cand, depth + batch)
    fresh = np.unique(lists[:, depth:stop])
    fresh = fresh[~seen[fresh]]
    seen[fresh] = True
    tau = local[np.arange(m), lists[:, stop - 1]].sum() if stop < n_cand else np.inf
    return fresh, local[:, fresh].sum(axis=0), stop, tau


def threshold_knn(local, k: int, *, exclude: int | None = None, batch: int = 1) -> FaginResult:
    """Exact global K nearest by Fagin's threshold algorithm, reading ``batch`` entries per list per step."""
    local, lists, k, batch = _prepare(local, k, exclude, batch)
    m, n_cand = lists.shape
    seen = np.zeros(local.shape[1], dtype=bool)
    ids, dist = np.empty(0, dtype=np.int64), np.empty(0)
    depth = random_reads = 0
    while depth < n_cand:
        fresh, fresh_dist, depth, tau = _read_step(local, lists, depth, batch, seen)
        random_reads += (m - 1) * fresh.size
        ids, dist = np.concatenate([ids, fresh]), np.concatenate([dist, fresh_dist])
        if ids.size >= k and np.partition(dist, k - 1)[k - 1] < tau:
            break
    top_ids, top_dist = _top_k(ids, dist, k)
    return FaginResult(top_ids, top_dist, sorted_reads=m * depth, random_reads=random_reads, depth=depth)


def fagin_knn(local, k: int, *, exclude: int | None = None, batch: int = 100) -> FaginResult:
    """Exact global K nearest by Fagin's algorithm: slices until K ids are in every list, then rank."""
    local, lists, k, batch = _prepare(local, k, exclude, batch)
    m, n_cand = lists.shape
    times_seen = np.zeros(local.shape[1], dtype=np.int64)
    depth = 0
    while depth < n_cand:
        stop = min(n_cand, depth + batch)
        np.add.at(times_seen, lists[:, depth:stop].ravel(), 1)
        depth = stop
        if (times_seen == m).sum() >= k:
            break
    ids = np.flatnonzero(times_seen)
    random_reads = int((m - times_seen[ids]).sum())  # the lists each seen id was not yet read from
    top_ids, top_dist = _top_k(ids, local[:, ids].sum(axis=0), k)
    return FaginResult(top_ids, top_dist, sorted_reads=m * depth, random_reads=random_reads, depth=depth)


def fagin_m(local, labels: np.ndarray, query: int, k: int, *, batch: int = 1) -> tuple[int, int, int]:
    """(m_q, sorted_reads, random_reads) for eq. (1) by threshold-algorithm ranked enumeration.

    Seen candidates wait in a heap; one leaves it (in global order) once it cannot be overtaken by
    an unseen candidate: distance below τ, or equal to τ and of the query's class. When the K-th
    one of the query's class leaves at distance r_q > 0, m_q = 1 + those that left at a distance
    below r_q; when r_q = 0 the enumeration goes on until every candidate at distance 0 has left,
    and m_q = 1 + their number (the tie rule of :mod:`fedstream.selection.reference`).
    """
    local = check_local(local, query)
    m = local.shape[0]
    lists = client_sorted_lists(local, query)
    n_cand = lists.shape[1]
    same = np.asarray(labels) == labels[query]
    seen = np.zeros(local.shape[1], dtype=bool)
    heap: list[tuple[float, int, int]] = []
    out: list[float] = []  # distances of the candidates that left, in order
    depth = random_reads = hits = 0
    zero_radius = False
    while True:
        if depth < n_cand:
            fresh, fresh_dist, depth, tau = _read_step(local, lists, depth, batch, seen)
            random_reads += (m - 1) * fresh.size
            for i, d in zip(fresh.tolist(), fresh_dist.tolist()):
                heapq.heappush(heap, (d, 0 if same[i] else 1, i))
        while heap and (heap[0][0] < tau or (heap[0][0] == tau and heap[0][1] == 0)):
            if zero_radius and heap[0][0] > 0:
                return 1 + len(out), m * depth, random_reads  # every distance-0 candidate is out
            d, other, _ = heapq.heappop(heap)
            out.append(d)
            hits += other == 0
            if hits == k and not zero_radius:
                if d > 0:
                    return 1 + sum(x < d for x in out), m * depth, random_reads
                zero_radius = True
        if zero_radius and (depth >= n_cand or tau > 0) and (not heap or heap[0][0] > 0):
            return 1 + len(out), m * depth, random_reads
        if depth >= n_cand and not heap:
            raise ConfigError(f"k={k} exceeds the {int(same.sum()) - 1} other samples of the query's class")


def fagin_group_mi(
    blocks: Sequence[np.ndarray],
    labels,
    group,
    *,
    k: int = 10,
    queries=None,
    batch: int = 100,
    psi: str = "approx",
) -> tuple[float, int, int]:
    """Eq. (1) for one group through :func:`fagin_m`: ``(score, sorted_reads, random_reads)`` summed
    over queries."""
    blocks, y, group, q, k = check_group_inputs(blocks, labels, group, k, queries, psi)
    n, counts = y.shape[0], np.bincount(y)
    terms, s_reads, r_reads = [], 0, 0
    for i in q:
        local = np.stack([local_sq_distances(blocks[j], int(i)) for j in group])  # each client's own share
        m_q, s, r = fagin_m(local, y, int(i), k, batch=batch)
        s_reads, r_reads = s_reads + s, r_reads + r
        terms.append(digamma(n, psi) - digamma(counts[y[i]], psi) + digamma(k, psi) - digamma(m_q, psi))
    return math.fsum(terms) / len(terms), s_reads, r_reads  # exactly rounded, as the reference
