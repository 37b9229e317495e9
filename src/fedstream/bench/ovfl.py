"""``fedstream bench ovfl``: the fast online VFL engine against the plain PyTorch reference.

Both run the same configuration (paper model, 4 clients, i-MNIST, Full activation) in this process,
one after the other, so machine noise hits both alike; we report rounds/s and their ratio. The
reference is :class:`fedstream.ovfl.reference.ReferenceOnlineVFL`: per-sample autograd with DLR's
window kept as a list of l full gradients, summed every round.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from fedstream.config import load_config
from fedstream.experiments.sweep import expand_grid, sweep
from fedstream.ovfl.engine import CHUNK, OnlineVFL
from fedstream.ovfl.reference import ReferenceOnlineVFL
from fedstream.ovfl.stack import RunStack
from fedstream.transport import InProcessTransport
from fedstream.transport.messages import Embedding, Gradient

WARMUP = 200  # rounds run first so JIT compilation and caches are not timed
REPEATS = 5  # timed blocks per contender, interleaved; the best block counts (timeit's rule)


def _config(optimizer: str, window: int, rounds: int, data_root: str | None) -> dict:
    return load_config("ovfl-imnist", {
        "optimizer.name": optimizer, "optimizer.window": window, "activation.name": "full",
        "rounds": rounds, "data.root": data_root,
    })


class _Fast:
    """The simulator, warmed up, advanced block by block."""

    def __init__(self, optimizer: str, window: int, data_root: str | None):
        self.run = OnlineVFL(_config(optimizer, window, 2**62, data_root))
        self.run.run(WARMUP)

    def advance(self, rounds: int) -> None:
        self.run.run(self.run.t + rounds)


class _Reference:
    """The plain PyTorch reference, warmed up (its window filled), advanced block by block."""

    def __init__(self, optimizer: str, window: int, data_root: str | None):
        self.ref = ReferenceOnlineVFL(OnlineVFL(_config(optimizer, window, 2**62, data_root)))
        self.ref.run(WARMUP)

    def advance(self, rounds: int) -> None:
        self.ref.run(rounds)  # replays the stream from round 0: the same cost per round


def interleaved_rates(contenders: dict[str, object], rounds: dict[str, int], repeats: int = REPEATS) -> dict:
    """Rounds/s of each contender: ``repeats`` timed blocks each, taken in turn so that machine
    noise hits all of them alike; a contender's rate is its best block (the least disturbed)."""
    best = {name: float("inf") for name in contenders}
    for _ in range(repeats):
        for name, c in contenders.items():
            tic = time.perf_counter()
            c.advance(rounds[name])
            best[name] = min(best[name], time.perf_counter() - tic)
    return {
        name: {"rounds": rounds[name], "seconds": best[name], "rounds_per_second": rounds[name] / best[name]}
        for name in contenders
    }


def breakdown(rounds: int, data_root: str | None) -> dict:
    """Where a fast DLR-Full round spends its time: stream, transport, clients, server, the rest."""
    run = OnlineVFL(_config("dlr", 10, rounds, data_root))
    tic = time.perf_counter()
    for t0 in range(0, rounds, CHUNK):
        X, _, _ = run.stream.batch(t0, CHUNK)
        run.chunk_inputs(t0 // CHUNK, X)
    stream = time.perf_counter() - tic
    transport, e = InProcessTransport(4), np.zeros((1, 64), np.float32)
    tic = time.perf_counter()
    for t in range(rounds):
        for m in range(4):
            transport.up(Embedding(t, m, e))
            transport.down(Gradient(t, m, e))
    carry = time.perf_counter() - tic
    fast = _Fast("dlr", 10, data_root)
    client, server, tic = fast.run.clock.client, fast.run.clock.server, time.perf_counter()
    fast.advance(rounds)
    per = {"stream": stream, "transport": carry, "clients": fast.run.clock.client - client,
           "server": fast.run.clock.server - server}
    per["protocol and bookkeeping"] = max(time.perf_counter() - tic - sum(per.values()), 0.0)
    return {k: 1e6 * v / rounds for k, v in per.items()}  # microseconds per round


def _cpu_seconds() -> float:
    """CPU time of this process and its finished children (sweep workers): less disturbed than
    wall time by other jobs on a shared machine."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def sweep_run_rounds_per_second(k: int, rounds: int, data_root: str | None, workers: int | None,
                                stack: bool = False) -> dict:
    """Run-rounds/s of ``k`` configurations (optimiser x activation x lr) advanced side by side,
    each run alone or (``stack``) in stacks of batched kernels (:mod:`fedstream.ovfl.stack`)."""
    axes = {
        1: ["optimizer.name=dlr"],
        8: ["optimizer.name=ogd,dlr", "activation.name=full,random,event,fixed"],
        32: [
            "optimizer.name=ogd,dlr",
            "activation.name=full,random,event,fixed",
            "optimizer.lr=0.01,0.005,0.02,0.003",
        ],
    }[k]
    sets = [f"rounds={rounds}", "checkpoint.every=0", "activation.name=full"]
    if data_root:
        sets.append(f"data.root={data_root}")
    with tempfile.TemporaryDirectory() as tmp:
        specs = expand_grid("ovfl-imnist", sets, axes, Path(tmp))
        tic, cpu = time.perf_counter(), _cpu_seconds()
        sweep(specs, workers=workers, stack=stack)
        wall, cpu = time.perf_counter() - tic, _cpu_seconds() - cpu
    return {"k": k, "stacked": stack, "rounds_each": rounds, "seconds": wall, "cpu_seconds": cpu,
            "run_rounds_per_second": k * rounds / wall, "run_rounds_per_cpu_second": k * rounds / cpu}


def stacked_paper_rates(rounds: int, data_root: str | None) -> dict:
    """Run-rounds/s of each optimiser's stack of the paper's three activations (one table's
    stack), on one core, after a warm-up: what :func:`project_paper_grid` projects with."""
    rates = {}
    for optimizer in ("ogd", "slr", "dlr"):
        runs = [OnlineVFL(load_config("ovfl-imnist", {"optimizer.name": optimizer, "activation.name": a,
                                                      "rounds": 2**40, "data.root": data_root}))
                for a in ("full", "random", "event")]
        stack = RunStack(runs)
        stack.run(WARMUP)
        tic = time.perf_counter()
        stack.run(WARMUP + rounds)
        rates[optimizer] = len(runs) * rounds / (time.perf_counter() - tic)
    return rates


PAPER_ROUNDS = 2_000_000


def project_paper_grid(rounds: int, data_root: str | None, workers: int) -> dict:
    """Projected wall time of the paper's Tables 1-2 (18 runs of 2M rounds) on ``workers`` cores,
    from the measured single-run speed of each of the 9 configurations (each table has the same 9;
    Table 2's drift does not change the cost per round)."""
    per_config = {}
    for optimizer in ("ogd", "slr", "dlr"):
        for activation in ("full", "random", "event"):
            cfg = load_config("ovfl-imnist", {"optimizer.name": optimizer, "activation.name": activation,
                                              "rounds": rounds + WARMUP, "data.root": data_root})
            run = OnlineVFL(cfg)
            run.run(WARMUP)
            tic = time.perf_counter()
            run.run()
            per_config[f"{optimizer}-{activation}"] = rounds / (time.perf_counter() - tic)
    core_seconds = 2 * sum(PAPER_ROUNDS / rps for rps in per_config.values())
    stacked = stacked_paper_rates(rounds, data_root)
    stacked_core_seconds = 2 * sum(3 * PAPER_ROUNDS / rps for rps in stacked.values())
    return {"rounds_per_second": per_config, "core_seconds": core_seconds, "workers": workers,
            "projected_wall_minutes": core_seconds / workers / 60,
            "stacked_run_rounds_per_second": stacked, "stacked_core_seconds": stacked_core_seconds,
            "projected_wall_minutes_stacked": stacked_core_seconds / workers / 60}


CASES = [("dlr", 10), ("dlr", 100), ("ogd", 10)]


def bench_ovfl(*, fast_rounds: int = 20000, ref_rounds: int = 1000, data_root: str | None = None,
               windows: tuple[int, ...] = (10, 50, 100, 150), sweep_rounds: int = 16384,
               workers: int | None = None, log=print) -> dict:
    """Run every case; return (and log) a JSON-ready dict of the figures."""
    torch.set_num_threads(1)  # per-sample work: threads only add overhead, and the fast engine uses one
    results: dict = {"cases": [], "dlr_vs_ogd": []}
    for optimizer, window in CASES:
        rates = interleaved_rates(
            {
                "reference": _Reference(optimizer, window, data_root),
                "fast": _Fast(optimizer, window, data_root),
            },
            {"reference": max(ref_rounds // REPEATS, 1), "fast": max(fast_rounds // REPEATS, 1)},
        )
        ref, fast = rates["reference"], rates["fast"]
        ratio = fast["rounds_per_second"] / ref["rounds_per_second"]
        name = f"{optimizer.upper()}-Full" + (f" l={window}" if optimizer == "dlr" else "")
        results["cases"].append({"case": name, "reference": ref, "fast": fast, "speedup": ratio})
        log(
            f"{name:16s} reference {ref['rounds_per_second']:8.1f} rounds/s   "
            f"fast {fast['rounds_per_second']:8.1f} rounds/s   ratio {ratio:6.1f}x"
        )
    block = max(fast_rounds // REPEATS, 1)
    for window in windows:
        rates = interleaved_rates({"dlr": _Fast("dlr", window, data_root), "ogd": _Fast("ogd", 1, data_root)},
                                  {"dlr": block, "ogd": block})
        dlr, ogd = rates["dlr"]["rounds_per_second"], rates["ogd"]["rounds_per_second"]
        results["dlr_vs_ogd"].append({"window": window, "dlr": dlr, "ogd": ogd, "ratio": dlr / ogd})
        log(
            f"fast DLR l={window:<4d} {dlr:8.1f} rounds/s   fast OGD {ogd:8.1f} rounds/s   "
            f"DLR/OGD {dlr / ogd:5.2f}"
        )
    results["microseconds_per_round"] = parts = breakdown(fast_rounds, data_root)
    log("time per fast DLR-Full round: " + ", ".join(f"{k} {v:.1f} us" for k, v in parts.items()))
    results["sweep"] = []
    for k in (1, 8, 32):
        for stack in (False, True) if k > 1 else (False,):
            row = sweep_run_rounds_per_second(k, sweep_rounds, data_root, workers, stack)
            results["sweep"].append(row)
            log(
                f"sweep K={k:<3d} {'stacked' if stack else 'alone  '} "
                f"{row['run_rounds_per_second']:9.1f} run-rounds/s ({row['seconds']:.1f} s wall, "
                f"{row['run_rounds_per_cpu_second']:.1f} run-rounds per CPU second)"
            )
    grid = project_paper_grid(min(fast_rounds, 8192), data_root, workers or os.cpu_count() or 1)
    results["paper_grid"] = grid
    log(
        f"paper Tables 1-2 (18 runs x 2M rounds): {grid['core_seconds'] / 60:.1f} core-minutes, "
        f"projected {grid['projected_wall_minutes']:.1f} min wall on {grid['workers']} workers; "
        f"in stacks of 3 {grid['stacked_core_seconds'] / 60:.1f} core-minutes, "
        f"{grid['projected_wall_minutes_stacked']:.1f} min"
    )
    return results


def write_json(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
