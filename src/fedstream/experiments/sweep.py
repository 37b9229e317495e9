"""Run a grid of configurations side by side, on every core.

Runs are spread over worker processes (one per core by default). Inside a worker, each task runs
its runs its own way (:attr:`fedstream.runs.task.Task.run_many`: online VFL runs that read the same
stream advance together chunk by chunk, :mod:`fedstream.ovfl.sweep`). Every run writes its own
folder as it goes (metrics rows, checkpoints, summary), so an interrupted sweep resumes where it
stopped and finished runs are skipped.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from queue import Empty

from fedstream.config import check_config, load_config
from fedstream.config.loader import parse_override
from fedstream.config.schema import schema
from fedstream.errors import ConfigError
from fedstream.experiments.columns import column_value
from fedstream.runs.files import atomic_write
from fedstream.runs.folder import RunFolder
from fedstream.runs.task import Report, RunSpec
from fedstream.runs.workers import exit_with_parent
from fedstream.tasks import get_task

__all__ = ["RunSpec", "expand_grid", "run_group", "sweep", "work_units", "write_index"]


def cost(spec: RunSpec) -> float:
    """Relative cost estimate of a run, for ordering the work (in online-round units)."""
    return get_task(spec.config["task"]).cost(spec.config)


def expand_grid(config: str, sets: list[str], grid: list[str], out: Path) -> list[RunSpec]:
    """The cartesian product of ``--grid KEY=V1,V2`` items over ``config`` with ``--set``s."""
    axes = []
    for item in grid:
        if "=" not in item:
            raise ConfigError(f"--grid {item!r}: expected KEY=V1,V2,..., e.g. --grid optimizer.name=ogd,dlr")
        key, values = item.split("=", 1)
        axis = [f"{key.strip()}={v.strip()}" for v in values.split(",") if v.strip()]
        if not axis:
            raise ConfigError(f"--grid {item!r}: no values; expected KEY=V1,V2,...")
        axes.append(axis)
    specs = []
    for combo in itertools.product(*axes) if axes else [()]:
        for item in combo:
            parse_override(item)  # validates key and type with the usual messages
        # a run is named by its grid values ("dlr-random"); its config.yaml holds the rest
        name = "-".join(item.split("=", 1)[1] for item in combo) or "base"
        safe = re.sub(r"[^A-Za-z0-9_.=,+-]", "_", name)
        specs.append(RunSpec(name, load_config(config, [*sets, *combo]), out / safe))
    folders = [s.out for s in specs]
    if len(set(folders)) != len(folders):
        raise ConfigError("two runs of the grid map to the same folder; check --grid for repeated values")
    for spec in specs:  # cross-key checks now, not in a worker after other runs have finished
        check_config(spec.config)
    return specs


def work_units(specs: list[RunSpec], workers: int, *, stack: bool = False) -> list[list[RunSpec]]:
    """The sweep's units of work, in the order the workers take them.

    Without ``stack`` every run is a unit, in grid order: a worker takes the next run as soon as it
    is free, so the workers stay busy until the last run whatever the runs cost (a static split by
    estimated cost left one of two workers idle for a third of CHFL's Table II: a jannis run costs
    70 times a Sensorless one), and an interrupted sweep holds the grid's first runs. With
    ``stack``, runs that can share a stack (:func:`fedstream.ovfl.stack.config_stack_key`) form one
    unit, halved while there are fewer units than workers; the costliest go first.
    """
    if not stack:
        return [[spec] for spec in specs]
    bundles: dict[object, list[RunSpec]] = {}
    for i, spec in enumerate(specs):
        key = get_task(spec.config["task"]).stack_key(spec.config)
        bundles.setdefault(("alone", i) if key is None else key, []).append(spec)
    parts = list(bundles.values())
    while len(parts) < workers and max(len(b) for b in parts) > 1:
        big = max(parts, key=len)
        parts.remove(big)
        parts += [big[: len(big) // 2], big[len(big) // 2:]]
    return sorted(parts, key=lambda b: -sum(cost(s) for s in b))


def _complete(spec: RunSpec) -> dict | None:
    """The summary of a run that already finished with this very config, else None."""
    summary = RunFolder(spec.out).read_summary()
    if summary is None or not same_config(summary.get("config", {}), spec.config):
        return None
    return summary if get_task(spec.config["task"]).finished(summary, spec.config) else None


def same_config(old: dict, new: dict) -> bool:
    """True when ``new`` asks for the run ``old`` describes: equal values, where a key that ``old``
    lacks (added to fedstream since) counts as equal if ``new`` has it at its default."""
    known = schema().fields
    for key, value in new.items():
        if key in old:
            if old[key] != value:
                return False
        elif key not in known or value != known[key].default_for(new["task"]):
            return False
    return set(old) <= set(new)


def run_group(specs: list[RunSpec], report: Report = lambda n, t: None, *, stack: bool = False) -> list[dict]:
    """Run ``specs`` in this process (each task's runs its way: online runs side by side, batch runs
    one after the other); return their summaries. Finished runs are skipped, others resume. The
    folders of the runs to play are locked meanwhile: another sweep into them is refused."""
    summaries = {}
    todo: dict[str, list[RunSpec]] = {}
    for spec in specs:
        done = _complete(spec)
        if done is not None:
            summaries[spec.name] = done
            report(spec.name, get_task(spec.config["task"]).units(spec.config))
        else:
            todo.setdefault(spec.config["task"], []).append(spec)
    with ExitStack() as locks:
        for group in todo.values():
            for spec in group:
                locks.enter_context(RunFolder(spec.out))
        for name, group in todo.items():
            summaries |= get_task(name).run_many(group, report, stack)
    return [summaries[s.name] for s in specs]


_QUEUE = None


def _init_worker(queue) -> None:
    global _QUEUE
    _QUEUE = queue
    # a forked worker gets new stdout/stderr objects: the parent's may have been locked by another
    # thread (a progress bar's refresh) at the moment of the fork, and that lock would never be freed
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own streams)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    exit_with_parent()


def _worker(specs: list[RunSpec], stack: bool = False) -> list[dict]:
    return run_group(specs, lambda name, t: _QUEUE.put((name, t)), stack=stack)


def _drain(queue, on_report: Report) -> None:
    while True:
        try:
            on_report(*queue.get_nowait())
        except Empty:
            return


def worker_context(specs: list[RunSpec]):
    """The workers' start method. Where ``fork`` is safe (Linux) and some task of the sweep has a
    ``warm`` (data, compiled kernels), the parent first warms up what every worker needs and the
    workers fork from it, sharing those pages instead of each paying imports, data and kernel
    loading again (about 1.5 s a worker, measured in docs/online-vfl.md). Otherwise (no task to
    warm, or not Linux): ``spawn``, fresh workers rather than copies of a parent with nothing to share."""
    by_task: dict[str, list[RunSpec]] = {}
    for spec in specs:
        by_task.setdefault(spec.config["task"], []).append(spec)
    warms = [(warm, group) for name, group in by_task.items() if (warm := get_task(name).warm) is not None]
    if not sys.platform.startswith("linux") or not warms:
        return mp.get_context("spawn")
    for warm, group in warms:
        warm(group)
    return mp.get_context("fork")


def sweep(specs: list[RunSpec], *, workers: int | None = None,
          on_report: Report = lambda n, t: None, stack: bool = False) -> list[dict]:
    """Run every spec, on ``workers`` processes (default: every core); summaries in spec order.
    ``stack``: runs that can share batched kernels play as stacks (see :func:`run_group`)."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError("two runs of the sweep have the same name; check --grid for repeated values")
    workers = max(1, min(workers or os.cpu_count() or 1, len(specs)))
    if workers == 1:
        return run_group(specs, on_report, stack=stack)
    ctx = worker_context(specs)
    # a plain queue handed to each worker as it starts: a Manager's queue would live in a server
    # process of its own, which outlived the parent when that was killed
    queue = ctx.Queue()
    results: dict[str, dict] = {}
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(queue,)) as pool:
        groups = work_units(specs, workers, stack=stack)  # taken one at a time by whichever worker is free
        futures = [pool.submit(_worker, group, stack) for group in groups]
        try:
            while not all(f.done() for f in futures) or not queue.empty():
                _drain(queue, on_report)
                time.sleep(0.2)
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): stop the workers, do not wait for them
            pool.shutdown(wait=False, cancel_futures=True)
            for child in mp.active_children():
                child.terminate()
            raise
        for group, f in zip(groups, futures):
            results |= {spec.name: summary for spec, summary in zip(group, f.result())}
    return [results[s.name] for s in specs]


def write_index(specs: list[RunSpec], summaries: list[dict], out: Path) -> Path:
    """``sweep.json``: one entry per run with its folder and headline figures (those of its task)."""
    rows = []
    for s, r in zip(specs, summaries):
        task = get_task(s.config["task"])
        row = {"name": s.name, "folder": str(s.out), "task": task.name} | task.index_fields(r)
        rows.append(row | {c: column_value(r, c) for c in task.columns})
    out.mkdir(parents=True, exist_ok=True)
    return atomic_write(out / "sweep.json", json.dumps(rows, indent=2))
