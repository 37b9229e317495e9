"""``fedstream bench ovfl``: the simulator's two paths against a plain PyTorch reference and a floor.

Each case (paper model, 4 clients, i-MNIST, Full activation: DLR with l = 10, 100, 150, and OGD)
times four contenders in this process, in turn, so that machine noise hits them alike:

* ``fused``: the simulator as it runs by default (:mod:`fedstream.ovfl.fused`, the compiled loop);
* ``messages``: the simulator with ``simulator.path = "messages"`` (every message encoded, counted,
  decoded: the reference path of the engine, and the one compressed links and deployments take);
* ``reference``: :class:`fedstream.bench.plain_ovfl.PlainOnlineVFL`, per-sample PyTorch autograd
  written from the paper as a competent user would (DLR's window a ring of l flat gradients);
* ``floor``: the fused path's arithmetic with no protocol
  (:func:`fedstream.ovfl.fused_kernels.floor_segment`), on one chunk of the stream played over and over.

The table gives rounds/s, fused / reference and fused / floor.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import torch

from fedstream.bench.dlr_forms import form_costs, format_form_costs, imnist_config
from fedstream.bench.plain_ovfl import PlainOnlineVFL
from fedstream.bench.startup import worker_startup
from fedstream.config import load_config
from fedstream.experiments.sweep import expand_grid, sweep
from fedstream.ovfl.engine import CHUNK, OnlineVFL
from fedstream.ovfl.stack import RunStack

WARMUP = 200  # rounds run first so JIT compilation and caches are not timed


def chunk_block(rounds: int) -> int:
    """A timed block of the simulator: whole stream chunks (a run generates each chunk once; a
    block that stopped inside one would generate it again at the next call and count it twice)."""
    return max(rounds // CHUNK, 1) * CHUNK

REPEATS = 5  # timed blocks per contender, interleaved; the best block counts (timeit's rule)


def _config(optimizer: str, window: int, rounds: int, data_root: str | None, path: str = "auto") -> dict:
    return load_config("ovfl-imnist", {
        "optimizer.name": optimizer, "optimizer.window": window, "activation.name": "full",
        "rounds": rounds, "data.root": data_root, "simulator.path": path,
    })


class _Fast:
    """The simulator (``path``: auto, the fused path; messages), warmed up, advanced block by block."""

    def __init__(self, optimizer: str, window: int, data_root: str | None, path: str = "auto"):
        self.run = OnlineVFL(_config(optimizer, window, 2**62, data_root, path))
        self.run.run(CHUNK)  # the first chunk: compilation, caches, and blocks aligned to chunks

    def advance(self, rounds: int) -> None:
        self.run.run(self.run.t + rounds)


class _Plain:
    """The plain PyTorch reference, warmed up (its window filled), advanced block by block."""

    def __init__(self, optimizer: str, window: int, data_root: str | None):
        self.ref = PlainOnlineVFL(OnlineVFL(_config(optimizer, window, 2**62, data_root)))
        self.ref.advance(max(WARMUP, window))

    def advance(self, rounds: int) -> None:
        self.ref.advance(rounds)


class _Floor:
    """The kernel-only floor: the fused arithmetic on one stream chunk, played over and over."""

    def __init__(self, optimizer: str, window: int, data_root: str | None):
        run = OnlineVFL(_config(optimizer, window, 2**62, data_root))
        X, y, _ = run.stream.batch(0, CHUNK)
        self.path, self.j = run.fused, 0
        self.X, self.y = X, y
        self.advance(WARMUP)

    def advance(self, rounds: int) -> None:
        while rounds > 0:
            n = min(rounds, CHUNK - self.j)
            self.path.floor(self.X, self.y, self.j, self.j + n)
            self.j, rounds = (self.j + n) % CHUNK, rounds - n


def interleaved_rates(contenders: dict[str, object], rounds: dict[str, int], repeats: int = REPEATS) -> dict:
    """Rounds/s of each contender: ``repeats`` timed blocks each, taken in turn so that machine
    noise hits all of them alike; a contender's rate is its best block (the least disturbed)."""
    best = {name: float("inf") for name in contenders}
    cpu = dict(best)  # the thread's CPU time of each block: what a loaded machine disturbs least
    for _ in range(repeats):
        for name, c in contenders.items():
            tic, tic_cpu = time.perf_counter(), time.thread_time()
            c.advance(rounds[name])
            best[name] = min(best[name], time.perf_counter() - tic)
            cpu[name] = min(cpu[name], time.thread_time() - tic_cpu)
    return {
        name: {"rounds": rounds[name], "seconds": best[name], "rounds_per_second": rounds[name] / best[name],
               "cpu_seconds": cpu[name], "rounds_per_cpu_second": rounds[name] / max(cpu[name], 1e-9)}
        for name in contenders
    }


def breakdown(rounds: int, data_root: str | None) -> dict:
    """Where a fused DLR-Full (l = 10) round spends its time, in microseconds: the stream (rows
    and activation masks), the client and the server arithmetic (the compiled loop's cycle
    counter, :class:`fedstream.ovfl.protocol.ComputeClock`), the rest (ring and mask handling in
    the loop, one Python segment call per interval, metrics, ledger)."""
    run = OnlineVFL(_config("dlr", 10, rounds, data_root))
    tic = time.perf_counter()
    for t0 in range(0, rounds, CHUNK):
        X, _, _ = run.stream.batch(t0, CHUNK)
        run.chunk_inputs(t0 // CHUNK, X)
    stream = time.perf_counter() - tic
    fast, rounds = _Fast("dlr", 10, data_root), chunk_block(rounds)
    client, server, tic = fast.run.clock.client, fast.run.clock.server, time.perf_counter()
    fast.advance(rounds)
    per = {"stream": stream, "clients": fast.run.clock.client - client,
           "server": fast.run.clock.server - server}
    per["the rest"] = max(time.perf_counter() - tic - sum(per.values()), 0.0)
    return {k: 1e6 * v / rounds for k, v in per.items()}


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


CASES = [("dlr", 10), ("dlr", 100), ("dlr", 150), ("ogd", 1)]


def path_table(fast_rounds: int, ref_rounds: int, data_root: str | None, log=print) -> list[dict]:
    """Rounds/s of fused, messages, reference and floor for each of :data:`CASES` (see the module
    docstring), with fused / reference and fused / floor."""
    rows = []
    log(f"{'rounds/s':15s}{'fused':>7s}{'msgs':>7s}{'ref':>7s}{'floor':>7s}{'f/ref':>7s}{'m/ref':>6s}"
        f"{'t_f/t_fl':>8s}  clock load")  # t_f/t_fl: a fused round's time over a floor round's
    for optimizer, window in CASES:
        block, ref_block = chunk_block(fast_rounds // REPEATS), max(ref_rounds // REPEATS, 1)
        rates = interleaved_rates(
            {"fused": _Fast(optimizer, window, data_root),
             "messages": _Fast(optimizer, window, data_root, "messages"),
             "reference": _Plain(optimizer, window, data_root),
             "floor": _Floor(optimizer, window, data_root)},
            {"fused": block, "messages": block, "reference": ref_block, "floor": block},
        )
        name = f"{optimizer.upper()}-Full" + (f" l={window}" if optimizer == "dlr" else "")
        row = {"case": name, **rates, "load_average": os.getloadavg()}
        for label, key in (("wall", "rounds_per_second"), ("CPU", "rounds_per_cpu_second")):
            r = {k: v[key] for k, v in rates.items()}
            row[f"fused_vs_reference_{label}"] = r["fused"] / r["reference"]
            row[f"fused_over_floor_time_{label}"] = r["floor"] / r["fused"]  # rounds/s inverted
            log(f"{name:15s}{r['fused']:7.0f}{r['messages']:7.0f}{r['reference']:7.0f}{r['floor']:7.0f}"
                f"{r['fused'] / r['reference']:6.1f}x{r['messages'] / r['reference']:5.1f}x"
                f"{r['floor'] / r['fused']:7.2f}x  {label:4s} {os.getloadavg()[0]:.2f}")
        rows.append(row)
    by = {r["case"]: r["fused"] for r in rows}
    if "DLR-Full l=150" in by and "OGD-Full" in by:
        dlr, ogd = by["DLR-Full l=150"], by["OGD-Full"]
        log(f"fused DLR l=150 / OGD: {dlr['rounds_per_second'] / ogd['rounds_per_second']:.2f} (wall), "
            f"{dlr['rounds_per_cpu_second'] / ogd['rounds_per_cpu_second']:.2f} (CPU)")
    return rows


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def bench_ovfl(*, fast_rounds: int = 20000, ref_rounds: int = 1000, data_root: str | None = None,
               windows: tuple[int, ...] = (10, 50, 100, 150), sweep_rounds: int = 16384,
               workers: int | None = None, quick: bool = False, forms: bool = False, log=print) -> dict:
    """Run every case; return (and log) a JSON-ready dict of the figures (``quick``: the table of
    :func:`path_table` and the time per round only; ``forms``: only the per-layer cost of DLR's
    update forms against OGD's, :func:`fedstream.bench.dlr_forms.form_costs`)."""
    if forms:
        results = {"layer_forms": form_costs(imnist_config(data_root), windows=tuple(sorted({10, *windows})))}
        for line in format_form_costs(results["layer_forms"]):
            log(line)
        return results
    torch.set_num_threads(1)  # per-sample work: threads only add overhead, and the fast engine uses one
    results: dict = {"cases": path_table(fast_rounds, ref_rounds, data_root, log), "dlr_vs_ogd": []}
    results["microseconds_per_round"] = parts = breakdown(fast_rounds, data_root)
    log("time per fused DLR-Full l=10 round: " + ", ".join(f"{k} {v:.1f} us" for k, v in parts.items()))
    if quick:
        return results
    block = chunk_block(fast_rounds // REPEATS)
    for window in windows:
        rates = interleaved_rates({"dlr": _Fast("dlr", window, data_root), "ogd": _Fast("ogd", 1, data_root)},
                                  {"dlr": block, "ogd": block})
        dlr, ogd = rates["dlr"]["rounds_per_second"], rates["ogd"]["rounds_per_second"]
        results["dlr_vs_ogd"].append({"window": window, "dlr": dlr, "ogd": ogd, "ratio": dlr / ogd})
        log(
            f"fast DLR l={window:<4d} {dlr:8.1f} rounds/s   fast OGD {ogd:8.1f} rounds/s   "
            f"DLR/OGD {dlr / ogd:5.2f}"
        )
    results["layer_forms"] = form_costs(imnist_config(data_root), windows=tuple(sorted({10, *windows})))
    for line in format_form_costs(results["layer_forms"]):
        log(line)
    results["worker_startup"] = []
    for method in ("spawn", "fork"):
        row = worker_startup(method, workers or os.cpu_count() or 1, data_root)
        results["worker_startup"].append(row)
        log(f"sweep worker start-up, {method:5s}: {row['per_worker_seconds']:.2f} s a worker "
            f"(process {row['worker_start_seconds']:.2f} s, data and kernels and 2 rounds "
            f"{row['worker_first_rounds_seconds']:.2f} s), parent warm-up {row['parent_warm_seconds']:.2f} s "
            f"once; load {os.getloadavg()[0]:.2f}")
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
