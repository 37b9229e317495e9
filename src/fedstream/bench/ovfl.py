"""``fedstream bench ovfl``: the fast online VFL engine against the plain PyTorch reference.

Both run the same configuration (paper model, 4 clients, i-MNIST, Full activation) in this process,
one after the other, so machine noise hits both alike; we report rounds/s and their ratio. The
reference is :class:`fedstream.vfl.reference.ReferenceOnlineVFL`: per-sample autograd with DLR's
window kept as a list of l full gradients, summed every round.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from fedstream.config import load_config
from fedstream.vfl.engine import OnlineVFL
from fedstream.vfl.reference import ReferenceOnlineVFL

WARMUP = 200  # rounds run first so JIT compilation and caches are not timed


def _config(optimizer: str, window: int, rounds: int, data_root: str | None) -> dict:
    return load_config("ovfl-imnist", {
        "optimizer.name": optimizer, "optimizer.window": window, "activation.name": "full",
        "rounds": rounds, "data.root": data_root,
    })


def fast_rounds_per_second(optimizer: str, window: int, rounds: int, data_root: str | None) -> dict:
    """Rounds/s of the simulator, and where its time went."""
    run = OnlineVFL(_config(optimizer, window, rounds + WARMUP, data_root))
    run.run(WARMUP)
    base_client, base_server, tic = run.clock.client, run.clock.server, time.perf_counter()
    run.run()
    wall = time.perf_counter() - tic
    return {"rounds": rounds, "seconds": wall, "rounds_per_second": rounds / wall,
            "client_seconds": run.clock.client - base_client, "server_seconds": run.clock.server - base_server}


def reference_rounds_per_second(optimizer: str, window: int, rounds: int, data_root: str | None) -> dict:
    """Rounds/s of the plain PyTorch reference on the same configuration."""
    ref = ReferenceOnlineVFL(OnlineVFL(_config(optimizer, window, rounds, data_root)))
    ref.run(min(WARMUP, rounds))
    tic = time.perf_counter()
    ref.run(rounds)
    wall = time.perf_counter() - tic
    return {"rounds": rounds, "seconds": wall, "rounds_per_second": rounds / wall}


CASES = [("dlr", 10), ("dlr", 100), ("ogd", 10)]


def bench_ovfl(*, fast_rounds: int = 20000, ref_rounds: int = 1000, data_root: str | None = None,
               windows: tuple[int, ...] = (10, 50, 100, 150), log=print) -> dict:
    """Run every case; return (and log) a JSON-ready dict of the figures."""
    import torch

    torch.set_num_threads(1)  # per-sample work: threads only add overhead, and the fast engine uses one
    results: dict = {"cases": [], "dlr_vs_ogd": []}
    for optimizer, window in CASES:
        ref = reference_rounds_per_second(optimizer, window, ref_rounds, data_root)
        fast = fast_rounds_per_second(optimizer, window, fast_rounds, data_root)
        ratio = fast["rounds_per_second"] / ref["rounds_per_second"]
        name = f"{optimizer.upper()}-Full" + (f" l={window}" if optimizer == "dlr" else "")
        results["cases"].append({"case": name, "reference": ref, "fast": fast, "speedup": ratio})
        log(f"{name:16s} reference {ref['rounds_per_second']:8.1f} rounds/s   fast {fast['rounds_per_second']:8.1f} rounds/s   ratio {ratio:6.1f}x")
    ogd = fast_rounds_per_second("ogd", 1, fast_rounds, data_root)["rounds_per_second"]
    for window in windows:
        dlr = fast_rounds_per_second("dlr", window, fast_rounds, data_root)["rounds_per_second"]
        results["dlr_vs_ogd"].append({"window": window, "dlr": dlr, "ogd": ogd, "ratio": dlr / ogd})
        log(f"fast DLR l={window:<4d} {dlr:8.1f} rounds/s   fast OGD {ogd:8.1f} rounds/s   DLR/OGD {dlr / ogd:5.2f}")
    return results


def write_json(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
