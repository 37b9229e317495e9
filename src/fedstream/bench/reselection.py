"""VF-PS (re-)selection speed: the plain engine against the fast one, in one process (issue 33).

Part of ``fedstream bench selection``. Two cases, each scored by both engines, interleaved
(reference, fast, reference, fast, ...) so that a shared machine's load hits both alike:

* **relaxed re-selection**: MNIST's 60,000 training rows as 4 clients of 28×7 pixel columns,
  the rows present in the relaxed dynamic setting of ``selection-table2`` (``keep`` 0.1 at the
  start, arrivals 0.05 per epoch, lifespans 1..50 epochs) after ``epochs`` epochs, when the
  present share has settled near its ~55 % (about 33,000 rows); the marginal design (9 groups),
  K = 10, every row a query: one re-selection as a run makes it;
* **full MNIST**: the same on all 60,000 rows.

The reference ("before") is ``backend="dots"``: the straightforward blocked engine, one float32
SGEMM per client and tile for the dot products, the distances |a|² + |b|² − 2a·b in int32 (exact
on pixels), a top-K insertion over every same-class column and a count over every other-class
column. The fast path ("after") is ``backend="auto"``, which picks the int8 path on pixels
(``selection/_int8_kernels``: an int8 GEMM into int32, exact; the thresholded top-K; for the
marginal design, the kernels generated for its sum plan, ``selection/_plan_kernels``). Wall and
CPU seconds (both worker threads) are reported, with the load average before and after; on a
loaded machine the CPU ratio is the steadier. Both compute in exact integer
arithmetic, so their per-query counts m_q, the scores and the picks must be equal: the bench
checks each and reports the largest score difference.
"""

from __future__ import annotations

import os
import time

import numpy as np

from fedstream.selection.dynamic import RelaxedSchedule
from fedstream.selection.group_testing import group_test

OLD, NEW = "dots", "auto"  # the reference ("before") and the fast path ("after")


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return None


def relaxed_rows(
    n: int, *, keep: float = 0.1, arrival: float = 0.05, lifespan=(1, 50), epochs: int = 100, seed: int = 0
) -> np.ndarray:
    """The sorted row indices present after ``epochs`` steps of the relaxed schedule."""
    sched = RelaxedSchedule(n, keep=keep, arrival=arrival, lifespan=lifespan, seed=seed)
    for _ in range(epochs):
        sched.step()
    return np.flatnonzero(sched.mask)


def _picks(scores: np.ndarray) -> dict:
    """The clients VF-PS selects for l = 1 .. m-1 (top-l scores, as ``VFPSSelector``)."""
    order = np.argsort(-scores, kind="stable")
    return {l: sorted(order[:l].tolist()) for l in range(1, scores.size)}


def compare(blocks, y, *, k: int = 10, reps: int = 2, workers=None) -> dict:
    """Time group testing by both engines ``reps`` times, interleaved; equality of the results."""
    times = {OLD: [], NEW: []}
    cpu = {OLD: [], NEW: []}
    results = {}
    load_before = load_average()
    for _ in range(reps):
        for backend in (OLD, NEW):
            t0, c0 = time.perf_counter(), time.process_time()
            results[backend] = group_test(
                blocks, y, k=k, aggregate="marginal", backend=backend, workers=workers
            )
            times[backend].append(time.perf_counter() - t0)
            cpu[backend].append(time.process_time() - c0)
    old, new = results[OLD], results[NEW]
    ratios = [a / b for a, b in zip(times[OLD], times[NEW])]
    cpu_ratios = [a / b for a, b in zip(cpu[OLD], cpu[NEW])]
    return {
        "rows": int(y.size),
        "load_before": load_before,
        "load_after": load_average(),
        "old_s": times[OLD],
        "new_s": times[NEW],
        "old_cpu_s": cpu[OLD],
        "new_cpu_s": cpu[NEW],
        "old_min_s": min(times[OLD]),
        "new_min_s": min(times[NEW]),
        "speedup_min_over_min": min(times[OLD]) / min(times[NEW]),
        "speedup_median_pairwise": float(np.median(ratios)),
        "cpu_speedup_min": min(cpu_ratios),
        "cpu_speedup_median": float(np.median(cpu_ratios)),
        "max_score_diff": float(np.abs(old.group_scores - new.group_scores).max()),
        "scores_equal": bool(np.array_equal(old.group_scores, new.group_scores)),
        "picks_old": _picks(old.client_scores),
        "picks_new": _picks(new.client_scores),
        "picks_equal": _picks(old.client_scores) == _picks(new.client_scores),
        "client_scores": new.client_scores.tolist(),
    }


def bench_reselection(
    blocks,
    y,
    *,
    k: int = 10,
    reps: int = 2,
    epochs: int = 100,
    seed: int = 0,
    full: bool = True,
    workers=None,
) -> dict:
    """Both cases on the MNIST strips ``blocks`` / labels ``y`` (``full=False``: only the relaxed one)."""
    rows = relaxed_rows(y.size, epochs=epochs, seed=seed)
    small = np.concatenate([np.flatnonzero(y == c)[:30] for c in np.unique(y)])
    for backend in (OLD, NEW):  # outside the timings: numba's kernels, and PyTorch's import (int8 GEMM)
        group_test([b[small] for b in blocks], y[small], k=min(k, 5), aggregate="marginal", backend=backend)
    out = {
        "k": k,
        "reps": reps,
        "relaxed_epochs": epochs,
        "relaxed": compare([b[rows] for b in blocks], y[rows], k=k, reps=reps, workers=workers),
    }
    if full:
        out["full"] = compare(blocks, y, k=k, reps=reps, workers=workers)
    return out


def format_reselection(d: dict) -> list[str]:
    """Lines for the selection bench's text report."""
    lines = []
    for key, title in (
        ("relaxed", f"relaxed re-selection (rows present after {d['relaxed_epochs']} epochs)"),
        ("full", "full MNIST scoring"),
    ):
        if key not in d:
            continue
        c = d[key]
        load = ""
        if c.get("load_before") is not None:
            load = f"; load average {c['load_before']:.1f} -> {c['load_after']:.1f}"
        lines.append(
            f"  {title}, {c['rows']:,} rows x 4 clients, 9 groups: reference (float32 GEMM engine) "
            f"{c['old_min_s']:.2f} s, fast (int8 path) {c['new_min_s']:.2f} s (min of {d['reps']}): "
            f"{c['speedup_min_over_min']:.1f}x (median of pairs {c['speedup_median_pairwise']:.1f}x); "
            f"CPU seconds {min(c['old_cpu_s']):.1f} -> {min(c['new_cpu_s']):.1f}, "
            f"{c['cpu_speedup_min']:.1f}x min / {c['cpu_speedup_median']:.1f}x median; "
            f"scores equal: {c['scores_equal']} "
            f"(largest difference {c['max_score_diff']:.3g}), picks equal: {c['picks_equal']}{load}"
        )
    return lines
