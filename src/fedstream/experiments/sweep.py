"""Run a grid of online VFL configurations side by side, on every core.

Runs are spread over worker processes (one per core by default, balanced by estimated cost).
Inside a worker, runs that read the same stream advance together chunk by chunk: each chunk of
the stream is generated once and played by every run that needs it. Every run writes its own
folder as it goes (metrics rows, checkpoints, summary), so an interrupted sweep resumes where it
stopped and finished runs are skipped.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing as mp
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fedstream.config import check_config, load_config
from fedstream.config.loader import parse_override
from fedstream.errors import ConfigError, DivergedError
from fedstream.runtime.output import RunDirectory
from fedstream.vfl.engine import CHUNK, Hooks, OnlineVFL, make_stream

STREAM_KEYS = ("data.name", "data.root", "data.stats_rows", "seed", "stream.drift", "stream.drift_every")


@dataclass
class RunSpec:
    """One run of a sweep: its name (from the grid values), resolved config and folder."""

    name: str
    config: dict
    out: Path

    @property
    def cost(self) -> float:
        """Relative cost estimate, for balancing workers (SLR embeds l samples per round; in
        online-round units, a batch VFL epoch of MNIST is ~60 x 10^4, a CHFL round ~10^5)."""
        c = self.config
        if c["task"] == "vfl":
            return 6e5 * c["train.epochs"] * (c["data.train_rows"] or 60000) / 60000
        if c["task"] == "chfl":
            return 1e5 * c["hfl.rounds"] * c["hfl.clients"]
        per_round = 1.0 + (0.35 * c["optimizer.window"] if c["optimizer.name"] == "slr" else 0.0)
        return per_round * c["rounds"]


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


def assign(specs: list[RunSpec], workers: int) -> list[list[RunSpec]]:
    """Greedy longest-first assignment of runs to workers by estimated cost."""
    loads: list[float] = [0.0] * workers
    groups: list[list[RunSpec]] = [[] for _ in range(workers)]
    for spec in sorted(specs, key=lambda s: -s.cost):
        w = min(range(workers), key=lambda i: loads[i])
        groups[w].append(spec)
        loads[w] += spec.cost
    return [g for g in groups if g]


def _complete(spec: RunSpec) -> dict | None:
    """The summary of a run that already finished with this very config, else None."""
    path = spec.out / "summary.json"
    if not path.exists():
        return None
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc}); delete it to rerun that run") from None
    if not same_config(summary.get("config", {}), spec.config):
        return None
    finished = (spec.config["task"] != "ovfl" or summary.get("rounds") == spec.config["rounds"]
                or summary.get("diverged_at") is not None)
    return summary if finished else None


def same_config(old: dict, new: dict) -> bool:
    """True when ``new`` asks for the run ``old`` describes: equal values, where a key that ``old``
    lacks (added to fedstream since) counts as equal if ``new`` has it at its default."""
    from fedstream.config.schema import SCHEMA

    for key, value in new.items():
        if key in old:
            if old[key] != value:
                return False
        elif key not in SCHEMA or value != SCHEMA[key].default_for(new["task"]):
            return False
    return set(old) <= set(new)


class _Member:
    """A run inside a worker: engine, folder and hooks."""

    def __init__(self, spec: RunSpec, stream, report: Callable[[str, int], None]):
        self.spec, self.dir = spec, RunDirectory(spec.out)
        self.run = OnlineVFL(spec.config, stream=stream)
        if self.dir.checkpoint.exists():
            self.run.load(self.dir.checkpoint)
        self.dir.prepare(spec.config, self.run.interval_rows)
        self.hooks = Hooks(on_interval=self.dir.append_row, checkpoint_path=self.dir.checkpoint,
                           checkpoint_every=spec.config["checkpoint.every"], progress_every=2048,
                           on_progress=lambda r: report(spec.name, r.t))
        self.end = spec.config["rounds"]

    @property
    def done(self) -> bool:
        return self.run.t >= self.end


def run_group(specs: list[RunSpec], report: Callable[[str, int], None] = lambda n, t: None) -> list[dict]:
    """Run ``specs`` side by side in this process; return their summaries."""
    summaries = {}
    todo = []
    for spec in specs:
        done = _complete(spec)
        if done is not None:
            summaries[spec.name] = done
            report(spec.name, spec.config.get("rounds", 1))  # a batch run counts as one unit
        else:
            todo.append(spec)
    for spec in [s for s in todo if s.config["task"] != "ovfl"]:  # batch tasks: one after the other
        from fedstream.tasks import run_batch_task

        try:
            summaries[spec.name] = run_batch_task(spec.config, spec.out)
        except DivergedError as exc:  # one run blowing up must not stop the others
            summaries[spec.name] = {"task": spec.config["task"], "config": spec.config,
                                    "diverged_at": exc.round, "error": str(exc)}
            RunDirectory(spec.out).write_summary(summaries[spec.name])
        report(spec.name, 1)
    by_stream: dict[tuple, list[RunSpec]] = {}
    for spec in [s for s in todo if s.config["task"] == "ovfl"]:
        by_stream.setdefault(tuple(spec.config[k] for k in STREAM_KEYS), []).append(spec)
    for group in by_stream.values():
        stream = make_stream(group[0].config)
        members = [_Member(spec, stream, report) for spec in group]
        for m in members:  # checkpointed at its last round, but stopped before its summary
            if m.done:
                _close(m, summaries, report)
        while not all(m.done for m in members):
            chunk = min(m.run.t // CHUNK for m in members if not m.done)
            players = [m for m in members if not m.done and m.run.t // CHUNK == chunk]
            tic = time.perf_counter()
            X, y, _ = stream.batch(chunk * CHUNK, CHUNK)
            share = (time.perf_counter() - tic) / len(players)  # the shared chunk's cost, split
            for m in players:
                m.run.wall_seconds += share
                try:
                    m.run.play_chunk(chunk, X, y, m.end, m.hooks)
                except DivergedError as exc:  # one run blowing up must not stop the others
                    _close_diverged(m, exc, summaries, report)
                    continue
                if m.done:
                    _close(m, summaries, report)
    return [summaries[s.name] for s in specs]


def _close(m: _Member, summaries: dict, report: Callable[[str, int], None]) -> None:
    """Final checkpoint and summary of a finished run."""
    m.run.finish(m.hooks)
    summaries[m.spec.name] = summary = m.run.summary()
    m.dir.write_summary(summary)
    report(m.spec.name, m.run.t)


def _close_diverged(m: _Member, exc: DivergedError, summaries: dict, report: Callable[[str, int], None]) -> None:
    """A run whose model went NaN/inf: its summary says where, and it counts as finished."""
    summary = m.run.summary() | {"diverged_at": exc.round, "error": str(exc)}
    summaries[m.spec.name] = summary
    m.dir.write_summary(summary)
    m.end = m.run.t  # done
    report(m.spec.name, m.spec.config["rounds"])


_QUEUE = None


def _init_worker(queue) -> None:
    global _QUEUE
    _QUEUE = queue
    _exit_with_parent()


def _exit_with_parent(poll_seconds: float = 2.0) -> None:
    """End this worker when the process that started it dies (killed, not just interrupted):
    orphaned workers would otherwise keep running and writing to the run folders."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def _worker(specs: list[RunSpec]) -> list[dict]:
    return run_group(specs, lambda name, t: _QUEUE.put((name, t)))


def sweep(specs: list[RunSpec], *, workers: int | None = None,
          on_report: Callable[[str, int], None] = lambda n, t: None) -> list[dict]:
    """Run every spec, on ``workers`` processes (default: every core); summaries in spec order."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError("two runs of the sweep have the same name; check --grid for repeated values")
    workers = max(1, min(workers or os.cpu_count() or 1, len(specs)))
    if workers == 1:
        return run_group(specs, on_report)
    ctx = mp.get_context("spawn")
    queue = ctx.Manager().Queue()
    results: dict[str, dict] = {}
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(queue,)) as pool:
        groups = assign(specs, workers)
        futures = [pool.submit(_worker, group) for group in groups]
        while not all(f.done() for f in futures) or not queue.empty():
            while not queue.empty():
                on_report(*queue.get())
            time.sleep(0.2)
        for group, f in zip(groups, futures):
            results |= {spec.name: summary for spec, summary in zip(group, f.result())}
    return [results[s.name] for s in specs]


def write_index(specs: list[RunSpec], summaries: list[dict], out: Path) -> Path:
    """``sweep.json``: one entry per run with its folder and headline figures (those of its task)."""
    from fedstream.experiments.report import TASK_COLUMNS, column_value

    rows = []
    for s, r in zip(specs, summaries):
        row = {"name": s.name, "folder": str(s.out), "task": s.config["task"]}
        if s.config["task"] == "ovfl":
            row |= {"rounds": r["rounds"], "bytes_total": r["bytes"]["total"], "activation_rate": r["activation_rate"]}
        rows.append(row | {c: column_value(r, c) for c in TASK_COLUMNS[s.config["task"]]})
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.json"
    path.write_text(json.dumps(rows, indent=2))
    return path
