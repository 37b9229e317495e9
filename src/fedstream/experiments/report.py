"""``fedstream report DIR``: an experiment folder -> ``report.md`` and PNG figures.

The report puts our numbers next to the paper's: one table per ``[[paper]]`` entry of the
definition with ours, the paper's and the relative difference (flagged beyond 20 %), a table of
every run, the learning rates the tuning chose, and the figures the definition asks for
(:mod:`fedstream.experiments.plots`). Runs still in progress are listed as such; the report can be
rendered at any time from what has been written so far.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedstream.errors import ConfigError
from fedstream.experiments.columns import CUMULATIVE, LABELS, column_value, label
from fedstream.experiments.definition import (
    Experiment,
    PaperTable,
    load_experiment,
    parse_experiment,
)
from fedstream.experiments.frontier import (
    compare,
    frontier_table,
    gap_table,
    pareto,
    reference_folder,
    set_flags,
    write_preset,
)
from fedstream.experiments.plots import draw
from fedstream.runs.files import atomic_write
from fedstream.tasks import get_task

FLAG = 0.20  # relative difference beyond which a value is flagged for explanation


@dataclass
class Run:
    """One run of the experiment folder: its grid values and whatever it has written so far."""

    name: str
    grid: dict
    config: dict
    summary: dict | None
    curve: list[dict]

    @property
    def done(self) -> bool:
        return self.summary is not None


def _read_curve(path: Path) -> list[dict]:
    """metrics.csv as numbers; ValueError naming the file for a row that is not numeric."""
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        try:
            return [{k: float(v) for k, v in row.items() if v not in ("", None)}
                    for row in csv.DictReader(fh)]
        except (ValueError, TypeError) as exc:  # TypeError: a row with more cells than the header
            raise ValueError(f"{path}: a row is not numeric ({exc})") from None


def _read_summary(path: Path) -> dict | None:
    """summary.json, or None before the run has finished; ValueError if it is not a JSON object."""
    if not path.exists():
        return None
    try:
        summary = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: not a JSON object (got {type(summary).__name__})")
    return summary


def load_runs(folder: Path, warn: Callable[[str], None] = lambda message: None
              ) -> tuple[dict, Experiment, list[Run]]:
    """The experiment index, its definition and every run, from an experiment folder. A run whose
    summary.json or metrics.csv cannot be read is skipped, with a ``warn`` naming it."""
    index_path = folder / "experiment.json"
    if not index_path.exists():
        raise ConfigError(
            f"{folder}: no experiment.json; is this a folder written by `fedstream experiment run`?"
        )
    try:
        index = json.loads(index_path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{index_path}: not valid JSON ({exc})") from None
    exp = _definition(index)
    runs = []
    for entry in index["runs"]:
        run_dir = folder / entry["folder"]
        try:
            summary = _read_summary(run_dir / "summary.json")
            curve = _read_curve(run_dir / "metrics.csv")
        except (ValueError, OSError) as exc:
            warn(f"run {entry['name']!r} skipped: {exc}")
            continue
        runs.append(Run(entry["name"], entry["grid"], entry["config"], summary, curve))
    return index, exp, runs


def _definition(index: dict) -> Experiment:
    """The definition the experiment ran with (the shipped one by name if its file moved)."""
    path = index.get("definition")
    if path and Path(path).is_file():
        return load_experiment(path)
    return load_experiment(index["experiment"])


def _fmt(value: float | None, column: str) -> str:
    if value is None:
        return "–"
    if column in ("accumulated_error", "mean_activation_rate", "final_accuracy", "best_accuracy", "test_acc",
                  "prequential_acc") or column.startswith(("activation_rate", "test_acc_")):
        return f"{value:.4f}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _diff(ours: float | None, paper: float | None) -> str:
    if ours is None or paper is None or paper == 0:
        return "–"
    rel = (ours - paper) / abs(paper)
    return f"{rel:+.0%}" + (" ⚠" if abs(rel) > FLAG else "")


def _match(run: Run, keys: dict) -> bool:
    return all(str(run.grid.get(k)) == str(v) for k, v in keys.items())


def paper_table(table: PaperTable, runs: list[Run], scale_factor: float | None) -> list[str]:
    """Markdown lines: ours, paper and difference for each column of a paper table.

    A row whose ``run`` leaves some grid keys open (seeds, feature splits) matches several runs:
    ours is then their mean ± standard deviation (population, over the finished runs) and n.
    """
    head = ["run"]
    for c in table.columns:
        name = LABELS.get(c, c)
        head += [f"{name} ours", f"{name} paper", "diff"]
    lines = [f"### {table.table}", ""]
    if table.caption:
        lines += [table.caption, ""]
    if scale_factor:
        lines += [
            f"Cumulative columns (compute seconds, MB) are scaled ×{scale_factor:g} from our rounds to the "
            "paper's, so they compare per round; error rates are not scaled.",
            "",
        ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for keys, paper_values in table.rows:
        match = [r for r in runs if _match(r, keys) and r.done]
        cells = [label(keys)]
        for column, paper in zip(table.columns, paper_values):
            scale = scale_factor if scale_factor and column in CUMULATIVE else 1.0
            values = [v * scale for v in (column_value(r.summary, column) for r in match) if v is not None]
            ours = sum(values) / len(values) if values else None
            text = _fmt(ours, column)
            if len(values) > 1:  # a row that leaves grid keys open (seeds, splits): mean ± std over its runs
                std = (sum((v - ours) ** 2 for v in values) / len(values)) ** 0.5
                text += f" ± {_fmt(std, column)} (n={len(values)})"
            cells += [text, _fmt(paper, column), _diff(ours, paper)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _length(run: Run) -> str:
    """How far a run got: rounds (online), epochs (batch VFL) or done (CHFL)."""
    return get_task(run.config["task"]).length(run.summary, run.config, run.curve)


def runs_table(runs: list[Run]) -> list[str]:
    """Markdown lines: every run's headline figures (or its progress)."""
    cols = list(get_task(runs[0].config["task"]).columns) if runs else []
    lines = ["| run | length | " + " | ".join(LABELS[c] for c in cols) + " |", "|" + "---|" * (len(cols) + 2)]
    for run in runs:
        ok = run.done and run.summary.get("diverged_at") is None
        cells = [_length(run)] + [_fmt(column_value(run.summary, c), c) if ok else "–" for c in cols]
        lines.append(f"| {label(run.grid)} | " + " | ".join(cells) + " |")
    return lines + [""]


def tuning_table(index: dict) -> list[str]:
    tuning = index.get("tuning") or {}
    if not tuning:
        return []
    rows = list(tuning.values())
    values = list(rows[0]["values"])
    lines = [
        f"## Tuning of `{rows[0]['key']}`",
        "",
        f"One run of {rows[0].get('rounds', '?'):,} rounds per candidate; "
        f"{rows[0]['metric']} (lower is better); the bold value was chosen.",
        "",
        "| for | " + " | ".join(values) + " | chosen |",
        "|" + "---|" * (len(values) + 2),
    ]
    for row in rows:
        best = str(row["chosen"])
        cells = [("diverged" if row["values"][v] == float("inf") else
                  f"**{row['values'][v]:.4f}**" if v == best else f"{row['values'][v]:.4f}") for v in values]
        lines.append(f"| {label(row['per'])} | " + " | ".join(cells) + f" | {row['chosen']} |")
    return lines + [""]


def comparisons(folder: Path, index: dict, exp: Experiment, runs: list[Run], warn: Callable[[str], None],
                inform: Callable[[str], None]) -> tuple[list[str], dict]:
    """The tables of the frontier and gap figures (markdown lines) and their points for the plots
    (figure index -> (points, frontier)). A frontier's best configuration, when it reaches the
    target, is also written as a preset file ``best-N.toml`` (N: the figure's number)."""
    lines: list[str] = []
    compared = {}
    for i, fig in enumerate(exp.figures):
        comp = fig.compare
        if comp is None:
            continue
        x, y = fig.axes
        references = runs
        if comp.experiment:
            try:
                references = load_runs(reference_folder(folder, comp.experiment, index["scale"]), warn)[2]
            except ConfigError as exc:
                warn(str(exc))
                lines += [f"### {fig.title}", "", f"Not drawn: {exc}", ""]
                continue
        points, notes = compare(comp, runs, references, x, y)
        compared[i] = (points, pareto(points))
        if fig.kind == "gap":
            lines += gap_table(fig.title, comp, points, x, y)
        else:
            table, chosen, reached = frontier_table(fig.title, comp, points, x, y, exp.base, exp.sets)
            lines += table
            if chosen is not None:
                flags = " ".join(set_flags(exp.sets, chosen))
                inform(("best configuration" if reached else "closest to the target (not reached)")
                       + f" of {fig.title!r}: fedstream run {exp.base} {flags}")
            if reached:
                preset = write_preset(folder / f"best-{i + 1}.toml", exp, fig.title, chosen, comp.target)
                lines += [f"Written as a preset file beside this report: `{preset.name}` (run it with "
                          f"`fedstream run FOLDER/{preset.name} --set seed=N`).", ""]
        lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    return (["## Against the reference", ""] + lines if lines else []), compared


def write_report(folder: Path, warn: Callable[[str], None] = lambda message: None,
                 inform: Callable[[str], None] = lambda message: None) -> Path:
    """Render ``folder/report.md`` and ``folder/figures/*.png``; return the report's path. Runs that
    cannot be read are left out, each with a ``warn`` naming it (and a line in the report); the
    best configuration of each frontier figure is passed to ``inform`` as a command line."""
    folder = Path(folder)
    skipped: list[str] = []

    def skip(message: str) -> None:
        skipped.append(message)
        warn(message)

    index, exp, runs = load_runs(folder, skip)
    paper_rounds = exp.scales.get("paper", {}).get("rounds")
    done = [r for r in runs if r.done]
    our_rounds = done[0].summary.get("rounds") if done else None
    factor = paper_rounds / our_rounds if paper_rounds and our_rounds and paper_rounds != our_rounds else None
    lines = [f"# {exp.title}", "", f"Source: {exp.source}. Experiment `{exp.name}`, scale `{index['scale']}`"
             f" ({len(done)} of {len(runs)} runs finished).", ""]
    shown = {k: v for k, v in (index.get("overrides") or {}).items() if k != "data.root"}  # no machine paths
    if shown:
        lines += ["Settings: " + ", ".join(f"`{k}={v}`" for k, v in shown.items()), ""]
    if exp.notes:
        lines += [exp.notes.strip(), ""]
    if exp.paper:
        lines += ["## Ours next to the paper's", ""]
        for table in exp.paper:
            lines += paper_table(table, runs, factor)
    compared_lines, compared = comparisons(folder, index, exp, runs, warn, inform)
    lines += compared_lines
    lines += ["## Every run", ""] + runs_table(runs) + [f"- {m}" for m in skipped] + tuning_table(index)
    figures = draw(exp, runs, folder / "figures", factor, compared)
    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{title}](figures/{path.name})\n" for title, path in figures]
    path = folder / "report.md"
    atomic_write(path, "\n".join(lines))
    return path


__all__ = ["column_value", "label", "load_runs", "parse_experiment", "write_report"]
