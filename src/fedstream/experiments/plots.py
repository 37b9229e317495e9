"""The PNG figures of a report: prequential error curves and communication-vs-error scatters.

matplotlib is needed only here (``pip install 'fedstream[report]'``); it draws off-screen (Agg).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from fedstream.errors import ConfigError
from fedstream.experiments.columns import LABELS, column_value, label

AXIS_LABELS = {
    "round": "samples seen (rounds)", "interval_error": "error rate per interval", "epoch": "epoch",
    "test_accuracy": "test accuracy", "bytes_total": "bytes sent so far (up + down)", "tick": "ticks",
    "acc": "prequential accuracy",
}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(
            "fedstream report draws with matplotlib; install it with: pip install 'fedstream[report]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "figure"


def _short(key: str) -> str:
    """A grid key as a panel title: "activation.name" -> "activation", "activation.p" stays."""
    return key.removesuffix(".name")


def _legend(run, skip: set[str]) -> str:
    rest = {k: v for k, v in run.grid.items() if k not in skip}
    return label(rest) if rest else run.name


def _run_points(run, x_key: str, y_key: str, by_setting: bool) -> list[tuple]:
    """A run's (x, y) points: its metrics.csv rows, or (its grid value of ``x_key``, summary ``y_key``)."""
    if by_setting:
        y = column_value(run.summary, y_key) if run.done and run.summary.get("diverged_at") is None else None
        return [] if y is None else [(run.grid[x_key], y)]
    return [(row[x_key], row[y_key]) for row in run.curve if x_key in row and y_key in row]


def _mean_line(point_lists: list[list[tuple]], by_setting: bool) -> list[tuple]:
    """One line from several runs' points: the mean y per x value (x a grid setting), else the
    pointwise mean of x and y over the runs that have the i-th point (curves of equal schedule)."""
    if by_setting:
        ys: dict = {}
        for pts in point_lists:
            for x, y in pts:
                ys.setdefault(x, []).append(y)
        return [(x, sum(v) / len(v)) for x, v in ys.items()]
    out = []
    for i in range(max((len(p) for p in point_lists), default=0)):
        have = [p[i] for p in point_lists if i < len(p)]
        out.append((sum(x for x, _ in have) / len(have), sum(y for _, y in have) / len(have)))
    return out


def curves(plt, exp, fig_def, runs, path: Path) -> None:
    """``y`` against ``x``, one panel per value of ``panels``, one line per value of ``lines`` (the
    mean of the runs that share it, when other grid keys vary) or else one line per run.

    ``x`` names a metrics.csv column (interval error per round, test accuracy per epoch, ...) or a
    grid key; then ``y`` is a summary column and each run is one point at its grid value (test
    accuracy against the common-feature ratio, say)."""
    panel_key, line_key = fig_def.panels, fig_def.lines
    x_key, y_key = fig_def.axes
    by_setting = x_key in exp.grid
    values = list(dict.fromkeys(str(r.grid[panel_key]) for r in runs)) if panel_key else [None]
    width = 4.2 * len(values) + 1 if panel_key else 7.0
    fig, axes = plt.subplots(1, len(values), figsize=(width, 3.8), sharey=True, squeeze=False)
    for ax, value in zip(axes[0], values):
        members = [r for r in runs if value is None or str(r.grid[panel_key]) == value]
        if line_key:
            groups: dict[str, list] = {}
            for run in members:
                groups.setdefault(str(run.grid[line_key]), []).append(run)
            lines = list(groups.items())
        else:
            lines = [(_legend(run, {panel_key}), [run]) for run in members]
        for name, group in lines:
            point_lists = [p for p in (_run_points(r, x_key, y_key, by_setting) for r in group) if p]
            if not point_lists:
                continue
            pts = point_lists[0] if len(point_lists) == 1 else _mean_line(point_lists, by_setting)
            per_point = len(point_lists) // len(pts) if by_setting else len(point_lists)
            if per_point > 1:
                name = f"{name} (mean of {per_point} runs)"
            if by_setting:  # grid order, which is the order the definition lists the values in
                order = [str(v) for v in exp.grid[x_key]]
                pts = sorted(pts, key=lambda p: order.index(str(p[0])) if str(p[0]) in order else len(order))
            xs, ys = zip(*pts)
            if by_setting and not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs):
                xs = [str(x) for x in xs]  # categorical axis (dataset, split kind, ...)
            ax.plot(xs, ys, marker="o", markersize=2.5 if not by_setting else 4, linewidth=1.2, label=name)
        ax.set_title(f"{_short(panel_key)} = {value}" if value is not None else fig_def.title, fontsize=10)
        ax.set_xlabel(AXIS_LABELS.get(x_key, _short(x_key)))
        ax.grid(alpha=0.3)
        if not by_setting:
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in exp.grid[x_key]):
            ax.set_xticks(exp.grid[x_key])  # the settings themselves (2, 5, 10 clients; 0.1 ... 0.5)
        if any(line.get_label() for line in ax.get_lines()):
            rest = [line_key] if line_key else [k for k in (runs[0].grid if runs else {}) if k != panel_key]
            ax.legend(fontsize=8, title=" / ".join(_short(k) for k in rest) or None, title_fontsize=8)
    axes[0][0].set_ylabel(AXIS_LABELS.get(y_key, _label(y_key)))
    if panel_key:
        fig.suptitle(fig_def.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _label(column: str) -> str:
    return LABELS.get(column, column)


def _paper_points(exp) -> dict[str, tuple[float, float]]:
    """{run label: (MB, accumulated error)} of every paper row that reports both."""
    points = {}
    for table in exp.paper:
        if {"total_mb", "accumulated_error"} <= set(table.columns):
            i, j = table.columns.index("total_mb"), table.columns.index("accumulated_error")
            points |= {
                label(keys): (v[i], v[j]) for keys, v in table.rows if v[i] is not None and v[j] is not None
            }
    return points


def _one_two_five(value: float, _pos=None) -> str:
    """Log-axis tick label: the value at 1, 2 and 5 x 10^n ("20", "5000", "0.2"), else none."""
    if value <= 0:
        return ""
    mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
    return f"{value:g}" if any(abs(mantissa - m) < 1e-6 * m for m in (1, 2, 5)) else ""


def _log_x_axis(ax) -> None:
    """Log x axis with readable labels: decades only over a wide range, 1-2-5 steps within two decades
    (batch VFL codecs span 4-40 MB, where a decade label may be the only one)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.set_xscale("log")
    low, high = ax.get_xlim()
    if high > 100 * low:  # minor labels would overlap
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.xaxis.set_major_formatter(FuncFormatter(_one_two_five))
        ax.xaxis.set_minor_formatter(FuncFormatter(_one_two_five))


def scatter(plt, exp, fig_def, runs, path: Path, scale_factor: float | None = None) -> None:
    """Total communication (MB) against accumulated error: one colour per run, ours as dots and
    the paper's as crosses. ``scale_factor`` projects our MB to the paper's number of rounds."""
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    paper = _paper_points(exp)
    colours = plt.get_cmap("tab10").colors
    xs = []  # the x values drawn
    for i, run in enumerate(r for r in runs if r.done and r.summary.get("diverged_at") is None):
        colour, name = colours[i % len(colours)], label(run.grid)
        x_key, y_key = fig_def.axes
        x = column_value(run.summary, x_key)
        y = column_value(run.summary, y_key)
        if x is None or y is None:
            continue
        x *= (scale_factor or 1.0) if x_key in ("total_mb", "up_mb", "down_mb") else 1.0
        xs.append(x)
        ax.scatter([x], [y], s=36, color=colour, label=name)
        if name in paper and fig_def.axes == ("total_mb", "accumulated_error"):
            ax.scatter([paper[name][0]], [paper[name][1]], s=44, marker="x", color=colour)
            xs.append(paper[name][0])
    ax.scatter([], [], marker="o", color="black", label="ours")
    if paper:
        ax.scatter([], [], marker="x", color="black", label="paper")
    log_x = bool(xs) and min(xs) > 0  # a log axis needs positive data: none while no run is drawn
    if log_x:
        _log_x_axis(ax)
    scaled = f", ours ×{scale_factor:g} to the paper's rounds" if scale_factor else ""
    x_key, y_key = fig_def.axes
    log_note = ", log scale" if log_x else ""
    ax.set_xlabel(f"{LABELS.get(x_key, x_key)} (MB = 2^20 bytes{log_note}{scaled})" if x_key.endswith("mb")
                  else LABELS.get(x_key, x_key))
    ax.set_ylabel(LABELS.get(y_key, y_key))
    ax.set_title(fig_def.title, fontsize=11)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def frontier(plt, fig_def, points: list, front: list, path: Path) -> None:
    """Traffic saved (%) against accuracy gap (points): every setting a dot, the Pareto frontier a
    line, the target a horizontal dashed line."""
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    ax.scatter([100 * p.traffic_saved for p in points], [p.gap for p in points], s=22, color="tab:blue",
               label="setting (mean over its seeds)")
    if front:
        ax.plot([100 * p.traffic_saved for p in front], [p.gap for p in front], color="tab:red",
                linewidth=1.2, marker="o", markersize=4, label="Pareto frontier")
        for p in front:
            ax.annotate(p.label, (100 * p.traffic_saved, p.gap), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
    ax.axhline(fig_def.compare.target, color="grey", linestyle="--", linewidth=1,
               label=f"target: gap {fig_def.compare.target:+g} points")
    ax.set_xlabel(f"traffic saved (%, 1 − {LABELS.get(fig_def.axes[0], fig_def.axes[0])} / reference's)")
    ax.set_ylabel(f"gap in {LABELS.get(fig_def.axes[1], fig_def.axes[1])} (points)")
    ax.set_title(fig_def.title, fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def gap_bars(plt, fig_def, points: list, path: Path) -> None:
    """One horizontal bar per setting: its gap against the reference, mean with ± std over the seeds."""
    fig, ax = plt.subplots(figsize=(7.2, 0.5 * len(points) + 1.6))
    names = [f"{p.label} ({100 * p.traffic_saved:.0f} % saved)" for p in points]
    ax.barh(names, [p.gap for p in points], xerr=[p.gap_std for p in points], color="tab:blue", capsize=3)
    ax.axvline(0, color="black", linewidth=0.8)
    if fig_def.compare.target is not None:
        ax.axvline(fig_def.compare.target, color="grey", linestyle="--", linewidth=1)
    ax.invert_yaxis()
    ax.set_xlabel(f"gap in {LABELS.get(fig_def.axes[1], fig_def.axes[1])} (points; mean ± std over seeds)")
    ax.set_title(fig_def.title, fontsize=11)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(exp, runs, folder: Path, scale_factor: float | None = None,
         compared: dict | None = None) -> list[tuple[str, Path]]:
    """Every figure of the definition, as PNG files in ``folder``; returns (title, path) pairs.
    ``compared``: figure index -> (points, frontier) for the frontier and gap figures (one without
    points is left out)."""
    if not exp.figures:
        return []
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, fig_def in enumerate(exp.figures):
        path = folder / f"{i + 1}-{_slug(fig_def.title)}.png"
        if fig_def.compare is not None:
            points, front = (compared or {}).get(i, ([], []))
            if not points:
                continue
            if fig_def.kind == "frontier":
                frontier(plt, fig_def, points, front, path)
            else:
                gap_bars(plt, fig_def, points, path)
        elif fig_def.kind == "curves":
            curves(plt, exp, fig_def, runs, path)
        else:
            scatter(plt, exp, fig_def, runs, path, scale_factor)
        out.append((fig_def.title, path))
    return out
