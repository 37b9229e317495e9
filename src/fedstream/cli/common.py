"""What the command groups share: the error console, progress bars, and checks of numbers of workers."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from fedstream.errors import FedstreamError

console = Console(stderr=True)


def progress_bar(quiet: bool, *, error: bool = True) -> Progress:
    """Completed / total, rounds per second and time left (``error``: the interval error too)."""
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    if error:
        columns.append(TextColumn("err {task.fields[error]:.4f}"))
    columns += [TextColumn("{task.fields[rps]:,.0f} rounds/s"), TimeRemainingColumn()]
    return Progress(*columns, console=console, disable=quiet)


def reporter(bar: Progress, task) -> Callable[[str, int], None]:
    """The ``on_report(run, rounds done)`` callback of runs side by side: their total and rate."""
    done: dict[str, int] = {}

    def on_report(name: str, t: int) -> None:
        done[name] = t
        elapsed = bar.tasks[task].elapsed or 1e-9
        bar.update(task, completed=sum(done.values()), rps=sum(done.values()) / elapsed)

    return on_report


def out_dir(text: str) -> Path:
    """``--out``: a folder path; an empty one is refused (it would write into the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder, got an empty path")
    return Path(text)


def check_workers(workers: int | None) -> None:
    if workers is not None and workers < 1:
        raise FedstreamError("--workers must be >= 1")


def table(title: str, rows: list[tuple[str, str]]) -> Table:
    """A two-column table of headline figures."""
    t = Table(title=title, show_header=False)
    t.add_column("metric", style="bold")
    t.add_column("value", justify="right")
    for name, value in rows:
        t.add_row(name, value)
    return t


def add_track(parser) -> None:
    parser.add_argument("--track", choices=["mlflow"], default=None,
                        help="log to MLflow (config, metrics per interval, bytes, timings, files); the "
                             "store is track.uri, else MLflow's default (./mlflow.db); needs "
                             "pip install 'fedstream[mlflow]'")


def add_sets(parser, help: str = "override a config key for every run (repeatable)") -> None:
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help)


STACK_HELP = ("runs that can share batched kernels (same optimiser, window, stream) play as stacks: "
              "same results, faster for many runs (see README)")
