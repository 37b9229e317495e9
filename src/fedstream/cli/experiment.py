"""``fedstream experiment list|run``: the paper's tables and figures as ready experiments."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from fedstream import tracking
from fedstream.cli.common import (
    STACK_HELP,
    add_sets,
    add_track,
    check_workers,
    console,
    out_dir,
    progress_bar,
    reporter,
)
from fedstream.config.loader import parse_override
from fedstream.experiments.definition import list_experiments, load_experiment
from fedstream.experiments.report import write_report
from fedstream.experiments.runner import run_experiment, total_rounds


def add_parsers(sub) -> None:
    exp = sub.add_parser("experiment", help="the paper's tables and figures as ready experiments")
    exp_sub = exp.add_subparsers(dest="action", required=True)
    exp_sub.add_parser("list", help="list the shipped experiments")
    run = exp_sub.add_parser("run", help="tune and run an experiment's grid (resumes if interrupted)")
    run.add_argument("name", help="experiment name (see `fedstream experiment list`) or a .toml file")
    run.add_argument("--scale", choices=["small", "paper"], default="small",
                     help="small: a smoke test in minutes; paper: the paper's size")
    run.add_argument("--out", type=out_dir, required=True,
                     help="experiment folder (rerun the command to resume)")
    add_sets(run)
    run.add_argument("--workers", type=int, default=None, help="processes (default: one per core)")
    run.add_argument("--stack", action="store_true", help=STACK_HELP)
    run.add_argument("--tune-rounds", type=int, default=None,
                     help="rounds of each tuning run (default: the definition's, per scale)")
    run.add_argument("--backend", choices=["local", "ray"], default="local",
                     help="local processes, or Ray tasks (pip install 'fedstream[ray]')")
    run.add_argument("--ray-address", default=None,
                     help="an existing Ray cluster (default: a local instance)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    add_track(run)


def cmd_experiment(args) -> int:
    if args.action == "list":
        table = Table(
            "experiment", "runs", "title", title="fedstream experiment run NAME --scale small|paper --out DIR"
        )
        for e in list_experiments():
            table.add_row(e.name, str(len(e.points())), e.title)
        Console().print(table)
        return 0
    check_workers(args.workers)
    exp = load_experiment(args.name)
    track, uri, experiment = tracking.take_settings(dict(parse_override(s) for s in args.sets), args.track)
    mlflow = tracking.open_store(uri, experiment) if track else None  # a bad URI fails before the runs
    with progress_bar(args.quiet, error=False) as bar:
        total = total_rounds(exp, args.scale, args.sets, args.tune_rounds)
        on_report = reporter(bar, bar.add_task(f"{exp.name} ({args.scale})", total=total, rps=0.0))
        run_experiment(exp, scale=args.scale, out=args.out, sets=args.sets, workers=args.workers,
                       backend=args.backend, ray_address=args.ray_address, tune_rounds=args.tune_rounds,
                       on_report=on_report, stack=args.stack)
    Console().print(f"results in {args.out}; render them with: fedstream report {args.out}")
    if mlflow is not None:
        report = _report(args.out)
        run_id = tracking.log_experiment(mlflow, args.out, experiment=experiment, report=report)
        Console().print(f"logged to MLflow: experiment {experiment!r}, run {run_id} with a child run per run "
                        f"({mlflow.tracking_uri})")
    return 0


def _report(out):
    """The experiment's report (report.md and figures) for MLflow; None (with a warning) if it cannot be
    drawn (no matplotlib)."""
    try:
        return write_report(out)
    except ImportError as exc:
        console.print(f"[yellow]warning:[/yellow] no report logged to MLflow ({exc}); pip install matplotlib")
        return None


COMMANDS = {"experiment": cmd_experiment}
