"""``fedstream report DIR``: report.md and PNG figures from an experiment folder."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from fedstream.cli.common import console
from fedstream.experiments.report import write_report


def add_parsers(sub) -> None:
    report = sub.add_parser("report", help="report.md and PNG figures from an experiment folder")
    report.add_argument("folder", type=Path, help="a folder written by `fedstream experiment run`")


def cmd_report(args) -> int:
    path = write_report(args.folder, warn=lambda message: console.print(
        f"[yellow]warning:[/yellow] {escape(message)}", highlight=False, soft_wrap=True),
        inform=lambda message: Console().print(escape(message), highlight=False, soft_wrap=True))
    Console().print(f"report written to {path}")
    return 0


COMMANDS = {"report": cmd_report}
