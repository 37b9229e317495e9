"""Run an experiment's runs as Ray tasks, on a local Ray instance or an existing cluster.

Each run is one task of one CPU that plays it with the same code as the local backend
(:func:`fedstream.experiments.sweep.run_group`), so it writes the same folder: metrics rows as they
come, checkpoints, the summary. Finished runs are skipped and interrupted ones resume. On a
cluster, the output folder must be on a file system every node mounts at the same path, and the
data under the same ``data.root``. Ray is an optional extra: ``pip install 'fedstream[ray]'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from fedstream.errors import ConfigError
from fedstream.experiments.sweep import RunSpec, run_group


def _play(spec: RunSpec) -> dict:
    """One run, inside a Ray worker (BLAS threads as in the CLI: one per run)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    return run_group([spec])[0]


def execute_on_ray(specs: list[RunSpec], *, address: str | None = None,
                   on_report: Callable[[str, int], None] = lambda name, t: None) -> list[dict]:
    """Run every spec as a Ray task; summaries in spec order. ``address``: a Ray cluster
    (``ray://host:10001`` or ``auto``); ``None`` starts a local instance for this process."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray; install it with: pip install 'fedstream[ray]'") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}})
    try:
        task = ray.remote(num_cpus=1)(_play)
        refs = {task.remote(spec): spec for spec in specs}
        results: dict[str, dict] = {}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            spec = refs[done[0]]
            results[spec.name] = ray.get(done[0])
            on_report(spec.name, spec.config.get("rounds", 1))  # a batch run counts as one unit
        return [results[s.name] for s in specs]
    finally:
        if started:
            ray.shutdown()
