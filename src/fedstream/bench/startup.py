"""What a sweep's worker pays before its first round, with each start method (``fedstream bench ovfl``).

``spawn`` (the sweeps' start method before the fused path): every worker starts a Python, imports
fedstream, loads the data and loads the compiled kernels from numba's cache. ``fork`` after the
parent's warm-up (:func:`fedstream.experiments.sweep.worker_context`): the parent pays that once and
each worker starts with it in memory.
"""

from __future__ import annotations

import multiprocessing as mp
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from fedstream.config import load_config
from fedstream.experiments.sweep import expand_grid, worker_context
from fedstream.ovfl.engine import OnlineVFL, make_stream


def first_rounds(t0: float, data_root: str | None) -> tuple[float, float]:
    """In a worker: (seconds from ``t0`` to this call, seconds to build a run and play 2 rounds)."""
    tic = time.time()
    cfg = load_config("ovfl-imnist", {"rounds": 2, "activation.name": "full", "data.root": data_root})
    OnlineVFL(cfg, stream=make_stream(cfg)).run()
    return tic - t0, time.time() - tic


def worker_startup(method: str, workers: int, data_root: str | None) -> dict:
    """Start ``workers`` workers by ``method`` ("spawn", or "fork" after the parent's warm-up) and
    time their start and their first rounds; the parent's warm-up is timed apart."""
    sets = ["rounds=2", "activation.name=full"] + ([f"data.root={data_root}"] if data_root else [])
    with tempfile.TemporaryDirectory() as tmp:
        specs = expand_grid("ovfl-imnist", sets, [], Path(tmp))
        tic = time.perf_counter()
        ctx = mp.get_context("spawn") if method == "spawn" else worker_context(specs)
        warm = time.perf_counter() - tic
        with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            t0 = time.time()
            times = [f.result() for f in [pool.submit(first_rounds, t0, data_root) for _ in range(workers)]]
    start = max(t[0] for t in times)
    first = max(t[1] for t in times)
    return {"method": method, "workers": workers, "parent_warm_seconds": warm, "worker_start_seconds": start,
            "worker_first_rounds_seconds": first, "per_worker_seconds": start + first}
