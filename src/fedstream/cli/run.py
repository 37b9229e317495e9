"""``fedstream presets`` and ``fedstream run CONFIG``: one configuration of any task."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from fedstream import tracking
from fedstream.cli.common import add_sets, add_track, console, out_dir, progress_bar, table
from fedstream.config import list_presets, load_config
from fedstream.errors import FedstreamError
from fedstream.jit import MESSAGE, announce, compile_seconds
from fedstream.runs.folder import RunFolder
from fedstream.runs.task import Task
from fedstream.tasks import get_task


def add_parsers(sub) -> None:
    sub.add_parser("presets", help="list the built-in configurations")
    run = sub.add_parser("run", help="run one configuration (a preset name or a TOML/YAML file)")
    run.add_argument("config", help="preset name (see `fedstream presets`) or path to a .toml/.yaml file")
    add_sets(run, "override a config key, e.g. --set optimizer.name=dlr (repeatable)")
    run.add_argument("--out", type=out_dir,
                     help="folder for summary.json, metrics.csv, config and checkpoints")
    run.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    run.add_argument("--quiet", action="store_true", help="no progress bar or table")
    add_track(run)


def cmd_presets(_args) -> int:
    t = Table("preset", "description", title="built-in presets (fedstream run NAME)")
    for name, text in list_presets().items():
        t.add_row(name, text)
    Console().print(t)
    return 0


def check_out(task: Task, out: Path | None, resume: bool) -> None:
    """Refuse ``--resume`` without a checkpoint to resume, and a fresh run over another one's files."""
    if resume and out is None:
        raise FedstreamError(f"--resume needs --out DIR (the folder holding {task.checkpoint_name})")
    if out is None:
        return
    checkpoint = out / task.checkpoint_name
    if resume and task.resume_needs_checkpoint and not checkpoint.exists():
        raise FedstreamError(f"{checkpoint} does not exist: nothing to resume")
    if not resume:
        for name in task.refuse_fresh:
            if (out / name).exists():
                hint = ("the run there has finished (or diverged): choose another --out"
                        if name == "summary.json" else "add --resume to continue it, or choose another --out")
                raise FedstreamError(f"{out / name} exists: {hint}")


def cmd_run(args) -> int:
    config = load_config(args.config, args.sets)
    track, uri, experiment = tracking.take_settings(config, args.track)
    task = get_task(config["task"])
    check_out(task, args.out, args.resume)
    if track and args.out is None:  # the run's files are what is logged: write them to a temporary folder
        with tempfile.TemporaryDirectory(prefix="fedstream-run-") as tmp:
            args.out = Path(tmp) / "run"
            return _run_and_track(task, config, args, uri, experiment)
    if track:
        return _run_and_track(task, config, args, uri, experiment)
    _run(task, config, args)
    return 0


def _run_and_track(task: Task, config: dict, args, uri: str | None, experiment: str) -> int:
    """Run, then log the run folder to MLflow (:mod:`fedstream.tracking`)."""
    mlflow = tracking.open_store(uri, experiment)  # before the run: a bad URI fails first
    _run(task, config, args)
    name = Path(args.config).stem if args.config.endswith((".toml", ".yaml", ".yml")) else args.config
    run_id = tracking.log_run_folder(mlflow, args.out, experiment=experiment, run_name=name, config=config)
    if not args.quiet:
        Console().print(f"logged to MLflow: experiment {experiment!r}, run {run_id} ({mlflow.tracking_uri})")
    return 0


def _run(task: Task, config: dict, args) -> None:
    folder = RunFolder(args.out, checkpoint_name=task.checkpoint_name) if args.out is not None else None
    if folder is not None and not (args.resume and not folder.checkpoint.exists()):
        folder.lock()  # a second run into the same --out is refused while this one runs (a resume
        # without a checkpoint fails before writing anything: no folder is made for it)
    try:
        summary = _simulate(task, config, args)
    finally:
        if folder is not None:
            folder.unlock()
    if not args.quiet:
        Console().print(table(*task.summary_rows(summary)))
    for warning in summary.get("warnings", []):  # e.g. a run that ended collapsed (also with --quiet)
        console.print(f"[bold yellow]warning:[/] {warning}", highlight=False)


def _simulate(task: Task, config: dict, args) -> dict:
    """Run with a progress bar: rounds, error and rate (online), or a status line (batch tasks).
    A line says when numba compiles kernels (the first run on a machine); the rate leaves that out."""
    rounds = config.get("rounds")
    if rounds is not None:
        bar = progress_bar(args.quiet)
        with bar, announce(lambda: args.quiet or bar.console.print(MESSAGE)):
            row = bar.add_task(task.title(config), total=rounds, error=float("nan"), rps=0.0)
            start: list[int] = []  # the first round played (a resumed run starts past 0)
            compiled = compile_seconds()

            def on_rounds(event: dict) -> None:
                if not start:
                    start.append(event["round"])
                elapsed = max((bar.tasks[row].elapsed or 0.0) - (compile_seconds() - compiled), 1e-9)
                bar.update(row, completed=event["round"], error=event["error"],
                           rps=(event["round"] - start[0]) / elapsed)

            return task.simulate(config, args.out, on_rounds, args.resume)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[status]}"),
                   console=console, disable=args.quiet)
    with bar, announce(lambda: args.quiet or bar.console.print(MESSAGE)):
        row = bar.add_task(task.title(config), total=None, status="starting")

        def on_progress(event: dict) -> None:
            if event.get("event") == "step":  # batch VFL: steps of an epoch
                bar.update(row, total=event["steps"], completed=event["step"],
                           status=f"epoch {event['epoch']}  loss {event.get('loss', float('nan')):.4f}")
            elif event.get("event") == "epoch":
                bar.update(row, status=f"epoch {event['epoch']}  test accuracy {event['test_accuracy']:.4f}")
            else:  # CHFL: federated rounds per method and learning rate
                bar.update(row, status=" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                for k, v in event.items()))

        return task.simulate(config, args.out, on_progress, args.resume)


COMMANDS = {"presets": cmd_presets, "run": cmd_run}
