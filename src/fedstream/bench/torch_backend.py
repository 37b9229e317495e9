"""Online VFL's torch backend beside the compiled engine: rounds per second of the same config.

For each optimiser (OGD, DLR, SLR) on ``ovfl-imnist`` (4 clients, the paper's MLPs), in this process
and one thread each (torch's and numba's), after the same warm-up rounds (compilation, lazy imports):

* ``numba fused``: the compiled engine's fused loop (``simulator.path = "auto"``);
* ``numba messages``: the compiled parties over the message path (every message encoded and counted);
* ``torch messages``: :mod:`fedstream.ovfl.torch_parties` on torch copies of the same MLPs, over the
  same message path (``model.backend = "torch"``, the only path it takes);
* ``torch own``: the torch backend on a user's model (two layers with GELU and layer norm per client,
  ``examples/own_models.py``'s shape), to show what a slightly larger model costs.

Each row gives rounds/s, the ratio to the fused loop, and the run's accumulated error; the torch row
on the built-in MLP must match the compiled rows' error (the check the tests make, repeated here on
the timed run). Run it with ``fedstream bench torch [--rounds N]``.
"""

from __future__ import annotations

import time

from torch import nn

from fedstream.config import load_config
from fedstream.ovfl.engine import OnlineVFL
from fedstream.runs.threads import one_torch_thread

CASES = (("numba fused", "numba", "auto", None), ("numba messages", "numba", "messages", None),
         ("torch messages", "torch", "messages", None),
         ("torch own", "torch", "messages", "fedstream.bench.torch_backend:gelu_client"))


def gelu_client(*, input_shape, embedding, **_):
    """The "torch own" row's client model."""
    (d,) = input_shape
    return nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, embedding))


def time_case(config: dict, warmup: int, rounds: int) -> tuple[float, dict]:
    """(rounds per second over ``rounds`` rounds after ``warmup`` rounds, the run's summary)."""
    run = OnlineVFL(config)
    run.run(warmup)
    tic = time.perf_counter()
    summary = run.run(warmup + rounds)
    return rounds / (time.perf_counter() - tic), summary


def bench_torch_backend(*, rounds: int = 2000, warmup: int = 200, data_root: str | None = None,
                        optimizers: tuple[str, ...] = ("ogd", "dlr", "slr"), log=print) -> list[dict]:
    """The table of the module doc, one row per (optimiser, case)."""
    rows = []
    for opt in optimizers:
        fused = None
        for name, backend, path, client in CASES:
            config = load_config("ovfl-imnist", {
                "rounds": warmup + rounds, "eval.interval": warmup + rounds, "checkpoint.every": 0,
                "optimizer.name": opt, "model.backend": backend, "simulator.path": path,
                "model.client": client, "data.root": data_root})
            with one_torch_thread():
                rps, summary = time_case(config, warmup, rounds)
            fused = rps if fused is None else fused
            rows.append({"optimizer": opt, "case": name, "rounds": rounds, "rounds_per_second": rps,
                         "ratio_to_fused": rps / fused, "accumulated_error": summary["accumulated_error"]})
            log(f"{opt:4s} {name:15s} {rps:10.0f} rounds/s  x{rps / fused:.3f}  error "
                f"{summary['accumulated_error']:.4f}")
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as the markdown table of docs/online-vfl.md."""
    lines = ["| optimiser | parties | rounds/s | vs fused | accumulated error |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['optimizer']} | {r['case']} | {r['rounds_per_second']:,.0f} | "
              f"{r['ratio_to_fused']:.3f} | {r['accumulated_error']:.4f} |" for r in rows]
    return "\n".join(lines)
