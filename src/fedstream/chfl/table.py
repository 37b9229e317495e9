"""The CHFL paper's result tables: datasets x methods x feature splits x runs, on every core.

Table II is every dataset at the default settings; Table III varies ``clients``, Table IV
``split`` (helena), Fig. 4 ``common_ratio``: pass the changed settings. Each cell is the mean
and standard deviation, over ``splits`` feature splits x ``runs`` runs, of the clients' mean test
accuracy (paper V-A3: 3 x 5). Jobs (one :func:`run_chfl` each) run in ``workers`` processes,
the longest first::

    python -m fedstream.chfl.table --datasets covertype sensorless jannis --workers 2 --json t2.json
    python -m fedstream.chfl.table --estimate          # time 1 and 2 rounds of each, project the table
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context

import numpy as np

from fedstream.chfl.settings import METHODS, SHARED_BASELINES, CHFLSettings, check_method
from fedstream.chfl.trainer import run_chfl
from fedstream.data.chfl_datasets import load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.runs.workers import exit_with_parent

COLUMNS = {  # (method, result variant) -> column title
    ("common", "common"): "Common", ("local", "local"): "Local", ("chfl", "mu=0"): "CHFL mu=0",
    ("chfl", "mu>0"): "CHFL mu>0", ("chfl", "chfl"): "CHFL (mu chosen)",
    ("concat", "concat"): "Concat", ("fedprox", "fedprox"): "FedProx",
    ("chfl", "common"): "Common", ("chfl", "concat"): "Concat",  # shared_baselines of a chfl run
}
COST = {"common": 1.0, "local": 1.0, "fedprox": 1.2, "concat": 2.0, "chfl": 5.0}  # rough, for ordering


def _job(args: tuple) -> dict:
    settings, root, method, seed = args
    out = run_chfl(settings, root, method=method, seed=seed)
    out.pop("settings", None)
    return out


def _jobs(settings: CHFLSettings, root: str, datasets: Sequence[str], methods: Sequence[str],
          splits: int, runs: int) -> list[tuple]:
    sizes = {d: len(load_chfl_dataset(d, root).table.y) for d in datasets}
    jobs = [(replace(settings, dataset=d, split_index=i), root, m, r)
            for d in datasets for m in methods for i in range(splits) for r in range(runs)]
    return sorted(jobs, key=lambda j: -sizes[j[0].dataset] * COST[j[2]])


def cells(results: Sequence[dict]) -> dict[str, dict[str, dict]]:
    """dataset -> column title -> {mean, std, n} over the runs' mean test accuracies.

    A baseline a chfl run shares (``shared_baselines``) is taken from there unless it also ran
    on its own.
    """
    acc: dict[tuple[str, str], list[float]] = {}
    ran = {(r["data"]["name"], r["method"]) for r in results}
    for r in results:
        for variant, v in r["variants"].items():
            if variant in SHARED_BASELINES and r["method"] != variant and (r["data"]["name"], variant) in ran:
                continue  # a shared baseline that also ran on its own: count it once
            acc.setdefault((r["data"]["name"], COLUMNS[(r["method"], variant)]), []).append(v["test_acc"])
    out: dict[str, dict[str, dict]] = {}
    for (d, col), xs in acc.items():
        out.setdefault(d, {})[col] = {"mean": float(np.mean(xs)), "std": float(np.std(xs)), "n": len(xs)}
    return out


def run_table(settings: CHFLSettings, data_root: str | os.PathLike[str] | None, *,
              datasets: Sequence[str], methods: Sequence[str] = ("local", "chfl"),
              splits: int = 3, runs: int = 5, workers: int = 2,
              progress: Callable[[int, int, dict], None] | None = None) -> dict:
    """Run every (dataset, method, split, run) and return the table cells and each run's result."""
    for m in methods:
        check_method(m)
    root = str(resolve_data_root(data_root))
    jobs = _jobs(settings, root, datasets, methods, splits, runs)
    t0 = time.perf_counter()
    results = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                             initializer=exit_with_parent) as pool:
        for i, r in enumerate(pool.map(_job, jobs), start=1):
            results.append(r)
            if progress is not None:
                progress(i, len(jobs), r)
    return {"cells": cells(results), "runs": results, "wall_seconds": time.perf_counter() - t0,
            "settings": settings.to_dict(), "splits": splits, "runs_per_split": runs, "workers": workers,
            "data": {d: next(r["data"] for r in results if r["data"]["name"] == d) for d in datasets}}


def estimate(settings: CHFLSettings, data_root: str | os.PathLike[str] | None, *,
             datasets: Sequence[str], methods: Sequence[str], splits: int = 3, runs: int = 5,
             workers: int = 2) -> dict:
    """Time each (dataset, method) at 1 and 2 rounds of one learning rate; project the table.

    Per run: fixed = t(1) - (t(2) - t(1)) (splitting, the final broadcast and test scoring) plus
    (t(2) - t(1)) x rounds x len(lrs); the table is that sum x splits x runs / workers. Times are
    CPU seconds of this (single-threaded) process, which on a shared machine estimate the wall
    time on idle cores better than wall clocks do; the wall-clock projection is reported too.
    """
    per: dict[str, dict[str, float]] = {}
    totals = {"cpu": 0.0, "wall": 0.0}
    warm = replace(settings, dataset=datasets[0], rounds=1, lrs=settings.lrs[:1], max_rows=500)
    run_chfl(warm, data_root, method=methods[0], seed=0)  # first-call costs, not part of any run
    for d in datasets:
        load_chfl_dataset(d, str(resolve_data_root(data_root)))  # not part of the timing
        for m in methods:
            t = {"cpu": [], "wall": []}
            for rounds in (1, 2):
                c0, w0 = time.process_time(), time.perf_counter()
                run_chfl(replace(settings, dataset=d, rounds=rounds, lrs=settings.lrs[:1]), data_root,
                         method=m, seed=0)
                t["cpu"].append(time.process_time() - c0)
                t["wall"].append(time.perf_counter() - w0)
            per[f"{d}/{m}"] = {}
            for clock, (t1, t2) in t.items():
                round_s, fixed = max(0.0, t2 - t1), max(0.0, 2 * t1 - t2)
                per[f"{d}/{m}"][f"{clock}_seconds_per_round"] = round_s
                per[f"{d}/{m}"][f"{clock}_fixed_seconds"] = fixed
                totals[clock] += (fixed + round_s * settings.rounds * len(settings.lrs)) * splits * runs
    return {"measured": per, "projected_wall_seconds_cpu_based": totals["cpu"] / workers,
            "projected_wall_seconds_wall_based": totals["wall"] / workers, "workers": workers}


def format_table(table: dict) -> str:
    """Markdown: one row per dataset, one column per method/variant, mean ± std."""
    cols = [c for c in dict.fromkeys(COLUMNS.values()) if any(c in row for row in table["cells"].values())]
    lines = ["| dataset | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for d, row in table["cells"].items():
        vals = [f"{row[c]['mean']:.4f} ± {row[c]['std']:.4f}" if c in row else "–" for c in cols]
        lines.append(f"| {d} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def _parse_set(items: Sequence[str]) -> dict:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value  # a bare string such as split=min-corr
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedstream.chfl.table", description=__doc__.split("\n")[0])
    p.add_argument("--datasets", nargs="+", default=["covertype", "sensorless", "jannis"])
    p.add_argument("--methods", nargs="+", default=["local", "chfl"], choices=METHODS,
                   help="chfl also reports Common (settings.shared_baselines)")
    p.add_argument("--splits", type=int, default=3)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data-root", default=None)
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=JSON", help="e.g. rounds=3 lrs=[0.001]")
    p.add_argument("--json", default=None, help="write the full results here")
    p.add_argument("--estimate", action="store_true",
                   help="time 1 and 2 rounds of each (dataset, method) and project the table")
    a = p.parse_args(argv)
    settings = CHFLSettings.from_dict(_parse_set(a.set))
    kw = {
        "datasets": a.datasets,
        "methods": a.methods,
        "splits": a.splits,
        "runs": a.runs,
        "workers": a.workers,
    }
    if a.estimate:
        out = estimate(settings, a.data_root, **kw)
        print(json.dumps(out, indent=2))
    else:
        out = run_table(settings, a.data_root, **kw, progress=lambda i, n, r: print(
            f"[{i}/{n}] {r['data']['name']} {r['method']} acc={r['test_acc']:.4f} "
            f"{r['wall_seconds']:.0f}s", flush=True))
        print(format_table(out))
        print(f"wall: {out['wall_seconds']:.0f} s on {a.workers} workers")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
