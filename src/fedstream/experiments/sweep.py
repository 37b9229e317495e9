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
from fedstream.ovfl.engine import CHUNK, STREAM_KEYS, Hooks, OnlineVFL, make_stream
from fedstream.runtime.output import RunDirectory


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
            return 1e5 * c["chfl.rounds"] * c["chfl.clients"]
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
    from fedstream.ovfl.stack import config_stack_key

    bundles: dict[object, list[RunSpec]] = {}
    for i, spec in enumerate(specs):
        key = config_stack_key(spec.config)
        bundles.setdefault(("alone", i) if key is None else key, []).append(spec)
    parts = list(bundles.values())
    while len(parts) < workers and max(len(b) for b in parts) > 1:
        big = max(parts, key=len)
        parts.remove(big)
        parts += [big[: len(big) // 2], big[len(big) // 2:]]
    return sorted(parts, key=lambda b: -sum(s.cost for s in b))


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


def run_group(specs: list[RunSpec], report: Callable[[str, int], None] = lambda n, t: None, *,
              stack: bool = False) -> list[dict]:
    """Run ``specs`` side by side in this process; return their summaries. With ``stack``, online
    runs that can share batched kernels play as stacks (:mod:`fedstream.ovfl.stack`): the same
    results, one kernel call per layer for all of them."""
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
            summaries[spec.name] = run_batch_task(
                spec.config, spec.out, resume=True
            )  # vfl: from its checkpoint
        except DivergedError as exc:  # one run blowing up must not stop the others
            summaries[spec.name] = {
                "task": spec.config["task"],
                "config": spec.config,
                "diverged_at": exc.round,
                "error": str(exc),
            }
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
        units = _units([m for m in members if not m.done], stack)
        while units:
            chunk = min(u.t // CHUNK for u in units)
            players = [u for u in units if u.t // CHUNK == chunk]
            tic = time.perf_counter()
            X, y, _ = stream.batch(chunk * CHUNK, CHUNK)
            share = (time.perf_counter() - tic) / sum(
                len(u.members) for u in players
            )  # the shared chunk's cost, split
            for u in players:
                for m in u.members:
                    m.run.wall_seconds += share
                units.remove(u)
                units += u.play(chunk, X, y, summaries, report)
    return [summaries[s.name] for s in specs]


class _Unit:
    """What plays a chunk: one run alone, or a stack of runs sharing batched kernels."""

    def __init__(self, members: list[_Member]):
        from fedstream.ovfl.stack import RunStack

        self.members = members
        self.stack = RunStack([m.run for m in members]) if len(members) > 1 else None

    @property
    def t(self) -> int:
        return self.members[0].run.t

    def play(self, chunk: int, X, y, summaries: dict, report) -> list[_Unit]:
        """Play this chunk; return the units that go on (none when finished; the survivors
        regrouped when runs of a stack diverged)."""
        from fedstream.ovfl.stack import StackDiverged

        end = self.members[0].end
        if self.stack is None:
            m = self.members[0]
            try:
                m.run.play_chunk(chunk, X, y, end, m.hooks)
            except DivergedError as exc:  # one run blowing up must not stop the others
                _close_diverged(m, exc, summaries, report)
                return []
        else:
            try:
                self.stack.play_chunk(chunk, X, y, end, [m.hooks for m in self.members])
            except StackDiverged as exc:
                for k in exc.runs:
                    _close_diverged(
                        self.members[k], self.stack.diverged_error(k, exc.round), summaries, report
                    )
                alive = [m for k, m in enumerate(self.members) if k not in exc.runs]
                return _units(alive, True)
        if self.t >= end:
            if self.stack is not None:
                self.stack.write_back()
            for m in self.members:
                _close(m, summaries, report)
            return []
        return [self]


def _units(members: list[_Member], stack: bool) -> list[_Unit]:
    """Members grouped into stacks of equal :func:`~fedstream.ovfl.stack.stack_key` (or alone)."""
    from fedstream.ovfl.stack import MAX_STACK, stack_key

    groups: dict[object, list[_Member]] = {}
    for i, m in enumerate(members):
        key = stack_key(m.run) if stack else None
        groups.setdefault(("alone", i) if key is None else key, []).append(m)
    return [_Unit(g[i:i + MAX_STACK]) for g in groups.values() for i in range(0, len(g), MAX_STACK)]


def _close(m: _Member, summaries: dict, report: Callable[[str, int], None]) -> None:
    """Final checkpoint and summary of a finished run."""
    m.run.finish(m.hooks)
    summaries[m.spec.name] = summary = m.run.summary()
    m.dir.write_summary(summary)
    report(m.spec.name, m.run.t)


def _close_diverged(
    m: _Member, exc: DivergedError, summaries: dict, report: Callable[[str, int], None]
) -> None:
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


def _worker(specs: list[RunSpec], stack: bool = False) -> list[dict]:
    return run_group(specs, lambda name, t: _QUEUE.put((name, t)), stack=stack)


def sweep(specs: list[RunSpec], *, workers: int | None = None,
          on_report: Callable[[str, int], None] = lambda n, t: None, stack: bool = False) -> list[dict]:
    """Run every spec, on ``workers`` processes (default: every core); summaries in spec order.
    ``stack``: runs that can share batched kernels play as stacks (see :func:`run_group`)."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError("two runs of the sweep have the same name; check --grid for repeated values")
    workers = max(1, min(workers or os.cpu_count() or 1, len(specs)))
    if workers == 1:
        return run_group(specs, on_report, stack=stack)
    ctx = mp.get_context("spawn")
    queue = ctx.Manager().Queue()
    results: dict[str, dict] = {}
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(queue,)) as pool:
        groups = work_units(specs, workers, stack=stack)  # taken one at a time by whichever worker is free
        futures = [pool.submit(_worker, group, stack) for group in groups]
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
            row |= {
                "rounds": r["rounds"],
                "bytes_total": r["bytes"]["total"],
                "activation_rate": r["activation_rate"],
            }
        rows.append(row | {c: column_value(r, c) for c in TASK_COLUMNS[s.config["task"]]})
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sweep.json"
    path.write_text(json.dumps(rows, indent=2))
    return path
