"""Run an experiment definition: tune, then run the grid, writing results as they come.

Layout of an experiment folder::

    OUT/experiment.json        what was asked (definition, scale, overrides) and each run's folder
    OUT/tuning.json            per tuned combination: the metric of every candidate and the choice
    OUT/tuning/<run>/          the short tuning runs (each a normal run folder)
    OUT/runs/<run>/            config.yaml, metrics.csv (appended as produced), checkpoint, summary.json

Runs go through :func:`fedstream.experiments.sweep.sweep` (every core, shared stream chunks,
checkpoints) or, with ``backend="ray"``, through Ray tasks. A finished run is skipped and an
interrupted one resumes from its checkpoint, so running the same command again completes the
experiment; a crash loses at most ``checkpoint.every`` rounds of one run.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

from fedstream.config import check_config, load_config
from fedstream.config.loader import parse_override
from fedstream.errors import ConfigError
from fedstream.experiments.definition import Experiment
from fedstream.experiments.ray_backend import execute_on_ray
from fedstream.experiments.sweep import RunSpec, sweep
from fedstream.runs.files import atomic_write
from fedstream.tasks import get_task

BACKENDS = ("local", "ray")


def grid_points(exp: Experiment) -> list[dict]:
    """Every run's grid values, in definition order (:meth:`Experiment.points`)."""
    return exp.points()


def run_name(point: dict) -> str:
    """A run's folder name: its grid values joined by '-' ("dlr-random"), or "base"."""
    name = "-".join(str(v) for v in point.values()) or "base"
    return "".join(c if c.isalnum() or c in "._=,+-" else "_" for c in name)


def _spec(exp: Experiment, overrides: dict, name: str, folder: Path) -> RunSpec:
    return RunSpec(name, check_config(load_config(exp.base, overrides)), folder)


def diverged(summary: dict) -> bool:
    """Whether a run's summary says it diverged (``diverged: true``; older ones: ``diverged_at``)."""
    return bool(summary.get("diverged")) or summary.get("diverged_at") is not None


def _summary_value(summary: dict, metric: str) -> float:
    """The tuning metric of a run; a diverged run is the worst candidate."""
    if diverged(summary):
        return float("inf")
    value = summary.get(metric)
    if not isinstance(value, (int, float)):
        raise ConfigError(f"tune.metric {metric!r} is not a number in summary.json (got {value!r})")
    return float(value)


def tune(exp: Experiment, scale: str, overrides: dict, out: Path, execute: Callable,
         rounds: int | None = None) -> dict[str, dict]:
    """One short run per candidate value and per combination of ``tune.per`` (other grid keys at
    their first value); returns ``{combination: {"values": {value: metric}, "chosen": value}}``.
    Lower metric wins; ties go to the earlier candidate."""
    t = exp.tune
    if t is None or (scale not in t.rounds and rounds is None):
        return {}
    rounds = rounds or t.rounds[scale]
    first = {k: v[0] for k, v in exp.grid.items()}
    combos = [dict(zip(t.per, c)) for c in itertools.product(*(exp.grid[k] for k in t.per))]
    specs, index = [], []
    for combo in combos:
        for value in t.values:
            name = run_name(combo | {t.key: value})
            cfg = overrides | first | combo | {t.key: value}
            resolved = load_config(exp.base, cfg)
            cfg |= get_task(resolved["task"]).tuning(resolved, rounds)  # online runs: a shorter run
            specs.append(_spec(exp, cfg, name, out / "tuning" / name))
            index.append((run_name(combo), value))
    summaries = execute(specs)
    results: dict[str, dict] = {}
    for (combo, value), summary in zip(index, summaries):
        row = results.setdefault(combo, {"key": t.key, "metric": t.metric, "rounds": rounds, "values": {},
                                         "diverged": []})
        row["values"][str(value)] = _summary_value(summary, t.metric)
        if diverged(summary):  # the candidate is recorded as diverged (and never chosen)
            row["diverged"].append(value)
    for combo, (name, row) in zip(combos, results.items()):
        scores = [row["values"][str(v)] for v in t.values]
        row["chosen"] = t.values[scores.index(min(scores))]
        row["per"] = combo
    atomic_write(out / "tuning.json", json.dumps(results, indent=2))
    return results


def _chosen(exp: Experiment, tuning: dict, point: dict) -> dict:
    if not tuning:
        return {}
    combo = run_name({k: point[k] for k in exp.tune.per})
    return {exp.tune.key: tuning[combo]["chosen"]}


def _execute_local(
    workers: int | None, on_report, stack: bool = False
) -> Callable[[list[RunSpec]], list[dict]]:
    return lambda specs: sweep(specs, workers=workers, on_report=on_report, stack=stack)


def total_rounds(exp: Experiment, scale: str, sets: list[str] = (), tune_rounds: int | None = None) -> int:
    """Rounds the experiment plays at ``scale``, tuning included (for progress bars); a run of a batch
    task (vfl, chfl) counts as one unit."""
    overrides = exp.overrides(scale) | dict(parse_override(s) for s in sets)
    configs = [load_config(exp.base, overrides | p) for p in grid_points(exp)]
    main = sum(get_task(c["task"]).units(c) for c in configs)
    t = exp.tune
    if t is None or (scale not in t.rounds and tune_rounds is None):
        return main
    combos = 1
    for k in t.per:
        combos *= len(exp.grid[k])
    return main + combos * len(t.values) * (tune_rounds or t.rounds[scale])


def run_experiment(
    exp: Experiment,
    *,
    scale: str,
    out: Path,
    sets: list[str] = (),
    workers: int | None = None,
    backend: str = "local",
    ray_address: str | None = None,
    tune_rounds: int | None = None,
    on_report: Callable[[str, int], None] = lambda name, t: None,
    stack: bool = False,
) -> dict:
    """Tune (if the definition says so), run every grid point at ``scale``; return the index.
    ``tune_rounds`` replaces the definition's tuning length (for scales between small and paper);
    ``stack``: compatible online runs play as stacks of batched kernels (local backend)."""
    if tune_rounds is not None and tune_rounds < 1:
        raise ConfigError(f"--tune-rounds must be >= 1, got {tune_rounds}")
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of {list(BACKENDS)}, got {backend!r}")
    overrides = exp.overrides(scale) | dict(parse_override(s) for s in sets)
    points = grid_points(exp)
    for point in points:  # every config must resolve before any run starts
        load_config(exp.base, overrides | point)
    out.mkdir(parents=True, exist_ok=True)
    if backend == "ray":
        execute = lambda specs: execute_on_ray(specs, address=ray_address, on_report=on_report)
    else:
        execute = _execute_local(workers, on_report, stack)
    _write_index(exp, scale, overrides, {}, points, out, status="tuning")  # the report can render from now on
    tuning = tune(exp, scale, overrides, out, execute, tune_rounds)
    specs = _write_index(exp, scale, overrides, tuning, points, out, status="running")
    execute(specs)
    return json.loads((out / "experiment.json").read_text())


def _write_index(exp: Experiment, scale: str, overrides: dict, tuning: dict, points: list[dict], out: Path,
                 *, status: str) -> list[RunSpec]:
    """Write ``experiment.json`` (what is asked, and where each run writes); return the run specs."""
    specs = [_spec(exp, overrides | p | _chosen(exp, tuning, p), run_name(p), out / "runs" / run_name(p))
             for p in points]
    index = {
        "experiment": exp.name, "title": exp.title, "source": exp.source,
        "definition": str(exp.path) if exp.path else None, "scale": scale, "overrides": overrides,
        "status": status, "tuning": tuning,
        "runs": [{"name": s.name, "grid": p, "folder": str(s.out.relative_to(out)), "config": s.config}
                 for s, p in zip(specs, points)],
    }
    atomic_write(out / "experiment.json", json.dumps(index, indent=2, default=str))
    return specs
