"""The ``fedstream`` command line.

    fedstream presets
    fedstream run CONFIG [--set KEY=VALUE ...] [--out DIR] [--resume] [--quiet]
    fedstream sweep CONFIG --grid KEY=V1,V2 [--grid ...] [--set ...] --out DIR [--workers N] [--stack]
    fedstream bench ovfl|huffman [--rounds N] [--ref-rounds N] [--json PATH]
    fedstream experiment list
    fedstream experiment run NAME --scale small|paper --out DIR [--set ...] [--workers N] [--stack] [--backend local|ray]
    fedstream report DIR
    fedstream deploy app DIR [CONFIG] [--set KEY=VALUE ...] [--out PATH] [--audit]
    fedstream deploy local [CONFIG] [--set KEY=VALUE ...] --out DIR [--timeout S] [--audit]

Errors that are the user's to fix (config, data files, checkpoints) print one line and exit 2.
"""

from __future__ import annotations

import os

# One sample per round: BLAS threads only add overhead on such small matrices, and they
# oversubscribe the cores when runs go side by side. Set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from fedstream import __version__
from fedstream.config import list_presets, load_config
from fedstream.errors import FedstreamError

console = Console(stderr=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedstream", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"fedstream {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("presets", help="list the built-in configurations")
    run = sub.add_parser("run", help="run one configuration (a preset name or a TOML/YAML file)")
    run.add_argument("config", help="preset name (see `fedstream presets`) or path to a .toml/.yaml file")
    run.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key, e.g. --set optimizer.name=dlr (repeatable)")
    run.add_argument("--out", type=Path, help="folder for summary.json, metrics.csv, config and checkpoints")
    run.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    run.add_argument("--quiet", action="store_true", help="no progress bar or table")
    sweep = sub.add_parser("sweep", help="run a grid of configurations side by side on every core")
    sweep.add_argument("config", help="base preset name or config file")
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a grid axis, e.g. --grid optimizer.name=ogd,slr,dlr (repeatable: cartesian product)",
    )
    sweep.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="override a key for every run (repeatable)")
    sweep.add_argument(
        "--out", type=Path, required=True, help="folder; one sub-folder per run, plus sweep.json"
    )
    sweep.add_argument("--workers", type=int, default=None, help="processes (default: one per core)")
    sweep.add_argument(
        "--stack",
        action="store_true",
        help="runs that can share batched kernels (same optimiser, window, stream) play as stacks: same results, faster for many runs (see README)",
    )
    sweep.add_argument("--quiet", action="store_true", help="no progress bar or table")
    bench = sub.add_parser(
        "bench", help="speed benchmarks, as ratios against a plain reference in the same process"
    )
    bench.add_argument("what", choices=["ovfl", "huffman", "selection", "network"],
                       help="ovfl: fast online VFL engine vs the PyTorch reference; "
                            "huffman: our Huffman coder vs the pure-Python dahuffman package; "
                            "selection: VF-PS scoring vs the per-sample reference; "
                            "network: online VFL on a local Flower deployment for B = 1, 16, 256")
    bench.add_argument("--rounds", type=int, default=20000, help="rounds timed for the fast engine")
    bench.add_argument("--ref-rounds", type=int, default=1000, help="rounds timed for the reference")
    bench.add_argument(
        "--sweep-rounds", type=int, default=16384, help="rounds of each run in the K-run sweeps"
    )
    bench.add_argument(
        "--workers", type=int, default=None, help="processes for the sweeps (default: one per core)"
    )
    bench.add_argument("--data-root", default=None, help="data folder (default: as for `run`)")
    bench.add_argument(
        "--json", type=Path, default=None, help="where to write the figures (default: bench-WHAT.json)"
    )
    net = bench.add_argument_group("network")
    net.add_argument(
        "--requests", type=int, default=6, help="requests per node for each batch size (B x requests events)"
    )
    net.add_argument("--batches", default="1,16,256", help="comma-separated network.batch values")
    net.add_argument("--config", default="ovfl-imnist", help="preset or config file")
    net.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    net.add_argument("--workdir", type=Path, default=Path("runs/bench-network"),
                     help="apps, logs and run outputs (default: runs/bench-network)")
    sel = bench.add_argument_group("selection")
    sel.add_argument("--samples", type=int, default=60000, help="MNIST training samples scored")
    sel.add_argument("--ref-samples", type=int, default=2000, help="subsample for the reference comparison")
    sel.add_argument("--k", type=int, default=10, help="neighbours K")
    sel.add_argument("--groups", type=int, default=10, help="random groups of the group testing")
    sel.add_argument("--seed", type=int, default=100, help="seed of the groups")
    sel.add_argument("--scale-clients", type=int, default=16, help="clients of the synthetic scale run")
    sel.add_argument(
        "--scale-samples", type=int, default=100000, help="samples of the scale run (0: skip it)"
    )
    sel.add_argument("--scale-queries", type=int, default=0, help="query samples of the scale run (0: all)")
    sel.add_argument("--no-paillier", action="store_true", help="skip the Paillier cost measurement")
    sel.add_argument("--key-bits", type=int, default=2048, help="Paillier key size")
    exp = sub.add_parser("experiment", help="the paper's tables and figures as ready experiments")
    exp_sub = exp.add_subparsers(dest="action", required=True)
    exp_sub.add_parser("list", help="list the shipped experiments")
    exp_run = exp_sub.add_parser("run", help="tune and run an experiment's grid (resumes if interrupted)")
    exp_run.add_argument("name", help="experiment name (see `fedstream experiment list`) or a .toml file")
    exp_run.add_argument("--scale", choices=["small", "paper"], default="small",
                         help="small: a smoke test in minutes; paper: the paper's size")
    exp_run.add_argument(
        "--out", type=Path, required=True, help="experiment folder (rerun the command to resume)"
    )
    exp_run.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                         help="override a config key for every run (repeatable)")
    exp_run.add_argument("--workers", type=int, default=None, help="processes (default: one per core)")
    exp_run.add_argument(
        "--stack",
        action="store_true",
        help="runs that can share batched kernels (same optimiser, window, stream) play as stacks: same results, faster for many runs (see README)",
    )
    exp_run.add_argument("--tune-rounds", type=int, default=None,
                         help="rounds of each tuning run (default: the definition's, per scale)")
    exp_run.add_argument("--backend", choices=["local", "ray"], default="local",
                         help="local processes, or Ray tasks (pip install 'fedstream[ray]')")
    exp_run.add_argument(
        "--ray-address", default=None, help="an existing Ray cluster (default: a local instance)"
    )
    exp_run.add_argument("--quiet", action="store_true", help="no progress bar")
    report = sub.add_parser("report", help="report.md and PNG figures from an experiment folder")
    report.add_argument("folder", type=Path, help="a folder written by `fedstream experiment run`")
    from fedstream.deploy.command import (
        add_deploy_parser,  # imports no Flower until `deploy` runs
    )

    add_deploy_parser(sub)
    return parser


def cmd_deploy(args) -> int:
    from fedstream.deploy.command import cmd_deploy as run

    return run(args)


def cmd_experiment(args) -> int:
    from fedstream.experiments.definition import list_experiments, load_experiment

    if args.action == "list":
        table = Table(
            "experiment", "runs", "title", title="fedstream experiment run NAME --scale small|paper --out DIR"
        )
        for e in list_experiments():
            n = 1
            for values in e.grid.values():
                n *= len(values)
            table.add_row(e.name, str(n), e.title)
        Console().print(table)
        return 0
    from fedstream.experiments.runner import run_experiment, total_rounds

    if args.workers is not None and args.workers < 1:
        raise FedstreamError("--workers must be >= 1")
    exp = load_experiment(args.name)
    with _progress(args.quiet, error=False) as bar:
        total = total_rounds(exp, args.scale, args.sets, args.tune_rounds)
        on_report = _reporter(bar, bar.add_task(f"{exp.name} ({args.scale})", total=total, rps=0.0))
        run_experiment(exp, scale=args.scale, out=args.out, sets=args.sets, workers=args.workers,
                       backend=args.backend, ray_address=args.ray_address, tune_rounds=args.tune_rounds,
                       on_report=on_report, stack=args.stack)
    Console().print(f"results in {args.out}; render them with: fedstream report {args.out}")
    return 0


def _reporter(bar: Progress, task) -> Callable[[str, int], None]:
    """The ``on_report(run, rounds done)`` callback of runs side by side: their total and rate."""
    done: dict[str, int] = {}

    def on_report(name: str, t: int) -> None:
        done[name] = t
        elapsed = bar.tasks[task].elapsed or 1e-9
        bar.update(task, completed=sum(done.values()), rps=sum(done.values()) / elapsed)

    return on_report


def cmd_report(args) -> int:
    from fedstream.experiments.report import write_report

    path = write_report(args.folder)
    Console().print(f"report written to {path}")
    return 0


def cmd_sweep(args) -> int:
    from fedstream.experiments.sweep import expand_grid, sweep, write_index

    if args.workers is not None and args.workers < 1:
        raise FedstreamError("--workers must be >= 1")
    specs = expand_grid(args.config, args.sets, args.grid, args.out)
    total = sum(s.config.get("rounds", 1) for s in specs)  # batch tasks count as one unit each
    with _progress(args.quiet, error=False) as bar:
        on_report = _reporter(bar, bar.add_task(f"sweep of {len(specs)} runs", total=total, rps=0.0))
        summaries = sweep(specs, workers=args.workers, on_report=on_report, stack=args.stack)
    index = write_index(specs, summaries, args.out)
    if not args.quiet:
        from fedstream.experiments.report import LABELS, TASK_COLUMNS, column_value

        columns = TASK_COLUMNS[specs[0].config["task"]]
        table = Table("run", *(LABELS.get(c, c) for c in columns), title=f"sweep: {index}")
        for spec, s in zip(specs, summaries):
            values = [column_value(s, c) for c in columns]
            table.add_row(spec.name, *("-" if v is None else f"{v:,.4g}" for v in values))
        Console().print(table)
    return 0


def cmd_bench(args) -> int:
    from fedstream.bench.ovfl import bench_ovfl, write_json

    if args.what == "selection":
        from fedstream.bench.selection import bench_selection, format_selection_bench

        results = bench_selection(
            args.data_root,
            samples=args.samples,
            ref_samples=args.ref_samples,
            k=args.k,
            n_groups=args.groups,
            seed=args.seed,
            scale_clients=args.scale_clients,
            scale_samples=args.scale_samples,
            scale_queries=args.scale_queries,
            paillier=not args.no_paillier,
            key_bits=args.key_bits,
            workers=args.workers,
        )
        Console().print(format_selection_bench(results), highlight=False)
        write_json(results, args.json or Path("bench-selection.json"))
        return 0
    if args.what == "network":
        from fedstream.bench.network import bench_network, format_network_bench

        try:
            batches = tuple(int(b) for b in args.batches.split(","))
        except ValueError:
            raise FedstreamError(
                f"--batches {args.batches!r}: expected comma-separated integers, e.g. 1,16,256"
            ) from None
        results = bench_network(batches=batches, requests=args.requests, config=args.config, sets=args.sets,
                                workdir=args.workdir, log=lambda line: Console().print(line, highlight=False))
        Console().print(format_network_bench(results), highlight=False)
        write_json(results, args.json or Path("bench-network.json"))
        return 0
    if args.what == "huffman":
        from fedstream.bench.huffman import bench_huffman, format_huffman_bench

        results = bench_huffman()
        Console().print(format_huffman_bench(results), highlight=False)
        write_json(results, args.json or Path("bench-huffman.json"))
        return 0

    if min(args.rounds, args.ref_rounds, args.sweep_rounds) < 1 or (args.workers or 1) < 1:
        raise FedstreamError("--rounds, --ref-rounds, --sweep-rounds and --workers must be >= 1")
    results = bench_ovfl(fast_rounds=args.rounds, ref_rounds=args.ref_rounds, data_root=args.data_root,
                         sweep_rounds=args.sweep_rounds, workers=args.workers,
                         log=lambda line: Console().print(line, highlight=False))
    path = args.json or Path("bench-ovfl.json")
    write_json(results, path)
    Console().print(f"figures written to {path}")
    return 0


def cmd_presets(_args) -> int:
    table = Table("preset", "description", title="built-in presets (fedstream run NAME)")
    for name, text in list_presets().items():
        table.add_row(name, text)
    Console().print(table)
    return 0


def cmd_run(args) -> int:
    from fedstream.ovfl.engine import OnlineVFL
    from fedstream.runtime.output import RunDirectory

    config = load_config(args.config, args.sets)
    if config["task"] != "ovfl":
        return _run_batch(config, args)
    if args.resume and args.out is None:
        raise FedstreamError("--resume needs --out DIR (the folder holding checkpoint.npz)")
    run = OnlineVFL(config)
    out = RunDirectory(args.out) if args.out else None
    if out is not None:
        if args.resume:
            run.load(out.checkpoint)
        elif out.checkpoint.exists():
            raise FedstreamError(
                f"{out.checkpoint} exists: add --resume to continue it, or choose another --out"
            )
        out.prepare(config, run.interval_rows)
    with _progress(args.quiet) as bar:
        task = bar.add_task(
            _title(config), total=config["rounds"], completed=run.t, error=float("nan"), rps=0.0
        )

        def on_progress(r: OnlineVFL) -> None:
            elapsed = bar.tasks[task].elapsed or 1e-9
            bar.update(
                task, completed=r.t, error=r.metrics.current_interval_error, rps=(r.t - start) / elapsed
            )

        start = run.t
        summary = run.run(
            on_progress=on_progress,
            on_interval=out.append_row if out else None,
            checkpoint_path=out.checkpoint if out else None,
            checkpoint_every=config["checkpoint.every"],
        )
        bar.update(task, completed=run.t)
    if out is not None:
        summary["output"] = str(out.write_summary(summary))
    if not args.quiet:
        Console().print(summary_table(summary))
    return 0


def _run_batch(config: dict, args) -> int:
    """``fedstream run`` for the batch tasks (vfl, chfl): a status line while it trains, a table after."""
    from fedstream.tasks import run_batch_task

    if args.resume and args.out is None:
        raise FedstreamError("--resume needs --out DIR (the folder holding checkpoint.pt)")
    if args.resume and not (args.out / "checkpoint.pt").exists():
        raise FedstreamError(f"{args.out / 'checkpoint.pt'} does not exist: nothing to resume")
    if not args.resume and args.out is not None:
        for name in ("summary.json", "checkpoint.pt"):
            if (args.out / name).exists():
                raise FedstreamError(f"{args.out / name} exists: add --resume to continue it, "
                                     "or choose another --out")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[status]}"),
                        console=console, disable=args.quiet)
    with progress as bar:
        task = bar.add_task(f"{config['task']} on {config['data.name']}", total=None, status="starting")

        def on_progress(event: dict) -> None:
            if event.get("event") == "step":  # batch VFL: steps of an epoch
                bar.update(task, total=event["steps"], completed=event["step"],
                           status=f"epoch {event['epoch']}  loss {event.get('loss', float('nan')):.4f}")
            elif event.get("event") == "epoch":
                bar.update(task, status=f"epoch {event['epoch']}  test accuracy {event['test_accuracy']:.4f}")
            else:  # CHFL: federated rounds per method and learning rate
                bar.update(task, status=" ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                 for k, v in event.items()))

        summary = run_batch_task(config, args.out, on_progress, resume=args.resume)
    if not args.quiet:
        Console().print(batch_summary_table(summary))
    return 0


def batch_summary_table(s: dict) -> Table:
    """The headline figures of a vfl or chfl summary."""
    c = s["config"]
    table = Table(title=f"fedstream {s['task']} on {c['data.name']}", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    b = s.get("bytes", {})
    rows = []
    if s["task"] == "vfl":
        rows += [("test accuracy (final / best)", f"{s['final_accuracy']:.4f} / {s['best_accuracy']:.4f}"),
                 ("epochs", str(s["epochs"])),
                 ("compression", f"up {c['compression.up']}{' + cache' if c['compression.cache'] else ''}, "
                                 f"down {c['compression.down']}")]
    elif "prequential_acc" in s:
        rows += [
            ("method", f"{c['chfl.method']} (stream)"),
            ("prequential accuracy", f"{s['prequential_acc']:.4f}"),
        ]
    else:
        rows += [("method", c["chfl.method"]), ("test accuracy (mean over clients)", f"{s['test_acc']:.4f}")]
    if b:
        rows.append(
            (
                "communication (MB, 2^20 B)",
                f"{(b['up'] + b['down']) / 2**20:,.2f}  "
                f"(up {b['up'] / 2**20:,.2f}, down {b['down'] / 2**20:,.2f})",
            )
        )
    rows.append(("wall time (s)", f"{s.get('wall_seconds', float('nan')):.1f}"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def _title(config: dict) -> str:
    act = config["activation.name"]
    return f"{config['optimizer.name'].upper()}-{act.capitalize()} on {config['data.name']}"


def _progress(quiet: bool, *, error: bool = True) -> Progress:
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    if error:
        columns.append(TextColumn("err {task.fields[error]:.4f}"))
    columns += [TextColumn("{task.fields[rps]:,.0f} rounds/s"), TimeRemainingColumn()]
    return Progress(*columns, console=console, disable=quiet)


def summary_table(s: dict) -> Table:
    """A compact human-readable view of ``summary.json``."""
    c = s["config"]
    table = Table(title=f"fedstream {s['task']}: {_title(c)}, {s['rounds']:,} rounds", show_header=False)
    table.add_column("metric", style="bold")
    table.add_column("value", justify="right")
    b = s["bytes"]
    rows = [
        ("accumulated error", f"{s['accumulated_error']:.4f}"),
        ("last interval error", f"{s['interval_errors'][-1]:.4f}" if s["interval_errors"] else "-"),
        (
            "communication (MB, 2^20 B)",
            f"{b['total'] / 2**20:,.2f}  (up {b['up'] / 2**20:,.2f}, down {b['down'] / 2**20:,.2f})",
        ),
        ("activation rate per client", " ".join(f"{r:.3f}" for r in s["activation_rate"])),
        ("client compute (s)", f"{s['client_compute_seconds']:.2f}"),
        ("server compute (s)", f"{s['server_compute_seconds']:.2f}"),
        ("wall time (s)", f"{s['wall_seconds']:.1f}"),
        ("rounds / s", f"{s['rounds_per_second']:,.0f}"),
    ]
    if "output" in s:
        rows.append(("summary", s["output"]))
    for name, value in rows:
        table.add_row(name, value)
    return table


INTERRUPTED = {
    "run": "interrupted: a run with --out continues from its last checkpoint with --resume",
    "sweep": "interrupted: rerun the same command to skip finished runs and resume the others",
    "experiment": "interrupted: rerun the same command to skip finished runs and resume the others",
}

COMMANDS = {"presets": cmd_presets, "run": cmd_run, "sweep": cmd_sweep, "bench": cmd_bench,
            "experiment": cmd_experiment, "report": cmd_report, "deploy": cmd_deploy}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except FedstreamError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        console.print(INTERRUPTED.get(args.command, "interrupted"))
        return 130


if __name__ == "__main__":
    sys.exit(main())
