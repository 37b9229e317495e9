"""``fedstream sweep CONFIG --grid KEY=V1,V2 ...``: a grid of runs side by side on every core."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from fedstream.cli.common import STACK_HELP, add_sets, check_workers, out_dir, progress_bar, reporter
from fedstream.experiments.columns import LABELS, column_value
from fedstream.experiments.sweep import expand_grid, sweep, write_index
from fedstream.tasks import get_task


def add_parsers(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of configurations side by side on every core")
    p.add_argument("config", help="base preset name or config file")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a grid axis, e.g. --grid optimizer.name=ogd,slr,dlr (repeatable: cartesian product)")
    add_sets(p, "override a key for every run (repeatable)")
    p.add_argument("--out", type=out_dir, required=True,
                   help="folder; one sub-folder per run, plus sweep.json")
    p.add_argument("--workers", type=int, default=None, help="processes (default: one per core)")
    p.add_argument("--stack", action="store_true", help=STACK_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")


def cmd_sweep(args) -> int:
    check_workers(args.workers)
    specs = expand_grid(args.config, args.sets, args.grid, args.out)
    total = sum(get_task(s.config["task"]).units(s.config) for s in specs)  # a batch run is one unit
    with progress_bar(args.quiet, error=False) as bar:
        on_report = reporter(bar, bar.add_task(f"sweep of {len(specs)} runs", total=total, rps=0.0))
        summaries = sweep(specs, workers=args.workers, on_report=on_report, stack=args.stack)
    index = write_index(specs, summaries, args.out)
    if not args.quiet:
        columns = get_task(specs[0].config["task"]).columns
        table = Table("run", *(LABELS.get(c, c) for c in columns), title=f"sweep: {index}")
        for spec, s in zip(specs, summaries):
            values = [column_value(s, c) for c in columns]
            table.add_row(spec.name, *("-" if v is None else f"{v:,.4g}" for v in values))
        Console().print(table)
    return 0


COMMANDS = {"sweep": cmd_sweep}
