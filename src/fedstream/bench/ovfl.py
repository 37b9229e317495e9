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


def breakdown(rounds: int, data_root: str | None) -> dict:
    """Where a fast DLR-Full round spends its time: stream, transport, clients, server, the rest."""
    import numpy as np

    from fedstream.transport import InProcessTransport
    from fedstream.vfl.engine import CHUNK
    from fedstream.vfl.messages import Embedding, Gradient

    run = OnlineVFL(_config("dlr", 10, rounds, data_root))
    tic = time.perf_counter()
    for t0 in range(0, rounds, CHUNK):
        X, _, _ = run.stream.batch(t0, CHUNK)
        means = np.stack([X[:, b].mean(axis=1) for b in run.blocks], axis=1)
        run.activation.mask(t0 // CHUNK, means)
    stream = time.perf_counter() - tic
    transport, e = InProcessTransport(4), np.zeros((1, 64), np.float32)
    tic = time.perf_counter()
    for t in range(rounds):
        for m in range(4):
            transport.up(Embedding(t, m, e))
            transport.down(Gradient(t, m, e))
    carry = time.perf_counter() - tic
    fast = fast_rounds_per_second("dlr", 10, rounds, data_root)
    per = {"stream": stream, "transport": carry, "clients": fast["client_seconds"], "server": fast["server_seconds"]}
    per["protocol and bookkeeping"] = max(fast["seconds"] - sum(per.values()), 0.0)
    return {k: 1e6 * v / rounds for k, v in per.items()}  # microseconds per round


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
    results["microseconds_per_round"] = parts = breakdown(fast_rounds, data_root)
    log("time per fast DLR-Full round: " + ", ".join(f"{k} {v:.1f} us" for k, v in parts.items()))
    return results


def write_json(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))
