"""The ``fedstream`` command line.

    fedstream presets
    fedstream run CONFIG [--set KEY=VALUE ...] [--out DIR] [--resume] [--quiet]
    fedstream sweep CONFIG --grid KEY=V1,V2 [--grid ...] [--set ...] --out DIR [--workers N] [--stack]
    fedstream bench ovfl|huffman|selection|network|device [its own options] [--json PATH]
    fedstream experiment list
    fedstream experiment run NAME --scale small|paper --out DIR [--set ...] [--workers N] [--stack]
                             [--backend local|ray]
    fedstream report DIR
    fedstream predict RUN_DIR --data FILE.npz --out preds.csv
    fedstream deploy app DIR [CONFIG] [--set KEY=VALUE ...] [--out PATH] [--audit]
    fedstream deploy local [CONFIG] [--set KEY=VALUE ...] --out DIR [--runtime grpc|flower] [--secure]
    fedstream serve server [CONFIG] --listen HOST:PORT --out DIR [--tls-dir DIR]
    fedstream serve client [CONFIG] --index M --connect HOST:PORT [--tls-dir DIR]

Errors that are the user's to fix (config, data files, checkpoints, output folders, a diverged
run) print one line and exit 2; Ctrl-C and SIGTERM print how to continue and exit 130.
One module per command group: ``run`` (run, presets), ``sweep``, ``experiment``, ``report``,
``predict``, ``bench``, ``deploy``, ``serve``; ``common`` holds the console and progress bars.
"""

from __future__ import annotations

import os

# One sample per round: BLAS threads only add overhead on such small matrices, and they
# oversubscribe the cores when runs go side by side. Set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

from rich.markup import escape  # noqa: E402

from fedstream import __version__  # noqa: E402
from fedstream.cli import bench, deploy, experiment, predict, report, run, serve, sweep  # noqa: E402
from fedstream.cli.common import console  # noqa: E402
from fedstream.errors import FedstreamError  # noqa: E402

GROUPS = (run, sweep, bench, experiment, report, predict, deploy, serve)  # in the order of `fedstream --help`
COMMANDS = {name: cmd for group in GROUPS for name, cmd in group.COMMANDS.items()}
INTERRUPTED = {
    "run": "interrupted: a run with --out continues from its last checkpoint with --resume",
    "sweep": "interrupted: rerun the same command to skip finished runs and resume the others",
    "experiment": "interrupted: rerun the same command to skip finished runs and resume the others",
    "deploy": "interrupted (its processes stopped): deploy local --resume with the same --out continues "
              "from the server's last checkpoint",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedstream", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"fedstream {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add_parsers(sub)
    return parser


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM (kill, a batch scheduler) ends a run as Ctrl-C does: the same message and exit code;
    # the last checkpoint stays and --resume (run) or rerunning (sweep, experiment) continues
    catch_term = args.command in INTERRUPTED and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if catch_term else None
    try:
        return COMMANDS[args.command](args)
    except FedstreamError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        console.print(INTERRUPTED.get(args.command, "interrupted"))
        return 130
    finally:
        if catch_term:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
