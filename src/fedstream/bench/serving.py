"""``fedstream bench serving``: per-request latency and throughput of the deployed parties' predictions.

It trains a deployment once (``fedstream deploy local CONFIG --secure``, or takes ``--run`` of one),
then serves it as ``fedstream serve server RUN_DIR --predict`` does: the server party in this process,
one ``fedstream serve client FOLDER --predict`` process per client on 127.0.0.1, mutual TLS. An
application (a gRPC channel in this process, certificate ``fedstream requester``) calls
``Predictor.Predict`` with K ids per request, one request at a time, for K in ``--sizes`` (1 and 64):
each request's wall time from the call to the answer (p50, p99) and requests/s, ids/s. The
reference, in the same process: the same predictions with the parties in this process
(:class:`~fedstream.deploy.serving.InProcessLink`: the same frames encoded and decoded, no socket,
no TLS), so the ratio is the cost of the network path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from fedstream.deploy.credentials import write_requester
from fedstream.deploy.serving import serve_in_process
from fedstream.deploy.serving_grpc import (
    PredictClient,
    ServingNodes,
    local_serving,
    start_server,
)
from fedstream.errors import FedstreamError
from fedstream.predict.files import run_summary
from fedstream.predict.ids import id_keys, own_table


def train(config: str, workdir: Path, sets: list[str]) -> Path:
    """A finished ``deploy local --secure`` run in ``workdir/run`` (reused when it is there)."""
    run = Path(workdir) / "run"
    if (run / "summary.json").exists():
        return run
    args = [sys.executable, "-m", "fedstream", "deploy", "local", config, "--secure", "--out", str(run)]
    args += [x for s in sets for x in ("--set", s)]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # its own one-line error, as the user would have read it
        said = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]
        raise FedstreamError(f"bench serving: `fedstream deploy local {config}` failed: "
                             f"{said.removeprefix('error: ')}")
    return run


def _times(predict, pool: np.ndarray, k: int, requests: int, warmup: int, rng) -> list[float]:
    out = []
    for i in range(warmup + requests):
        ids = pool[rng.choice(len(pool), size=k, replace=False)]
        tic = time.perf_counter()
        predict(ids)
        if i >= warmup:
            out.append(time.perf_counter() - tic)
    return out


def _row(where: str, k: int, times: list[float]) -> dict:
    t = np.asarray(times)
    return {"path": where, "ids_per_request": k, "requests": len(t),
            "p50_ms": float(np.percentile(t, 50) * 1e3), "p99_ms": float(np.percentile(t, 99) * 1e3),
            "requests_per_s": float(len(t) / t.sum()), "ids_per_s": float(k * len(t) / t.sum())}


def bench_serving(run: Path, *, sizes=(1, 64), requests: int = 500, warmup: int = 20, seed: int = 0) -> dict:
    """Latency and throughput of ``Predict`` on the deployed parties of ``run`` (see the module doc)."""
    config = run_summary(run)["config"]
    pool = id_keys(own_table(config, 0).columns[own_table(config, 0).names.index(config["data.id"])])
    folder, tls = local_serving(run)
    rows = []
    local = serve_in_process(run, folder)
    for k in sizes:
        rows.append(_row("in-process", k, _times(local.predict, pool, k, requests, warmup,
                                                 np.random.default_rng(seed))))
    if tls is not None:
        write_requester(tls)
    with ServingNodes(folder, local.n_clients, run / "deployment", tls_dir=tls) as nodes:
        link, _ = start_server(run, "127.0.0.1:0", tls_dir=tls,
                               on_listen=lambda link: nodes.start(f"127.0.0.1:{link.port}"))
        client = PredictClient(f"localhost:{link.port}", tls_dir=tls)
        try:
            for k in sizes:
                times = _times(client.predict, pool, k, requests, warmup, np.random.default_rng(seed))
                rows.append(_row("grpc" + (" mutual TLS" if tls else ""), k, times))
        finally:
            client.close()
            link.close()
    for ref, row in zip(rows[:len(sizes)], rows[len(sizes):]):
        row["p50_vs_in_process"] = row["p50_ms"] / ref["p50_ms"]
    return {"run": str(run), "task": config["task"], "clients": local.n_clients, "rows": rows}


def format_serving(results: dict) -> str:
    lines = [f"serving {results['run']} ({results['task']}, {results['clients']} client processes)",
             f"{'path':<18} {'ids/req':>7} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'ids/s':>9}"]
    for r in results["rows"]:
        lines.append(f"{r['path']:<18} {r['ids_per_request']:>7} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                     f"{r['requests_per_s']:>8.1f} {r['ids_per_s']:>9.0f}")
    return "\n".join(lines)


def write_json(results: dict, path: Path) -> None:
    Path(path).write_text(json.dumps(results, indent=2))
