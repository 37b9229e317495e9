"""The PNG figures of a report: prequential error curves and communication-vs-error scatters.

matplotlib is needed only here (``pip install 'fedstream[report]'``); it draws off-screen (Agg).
"""

from __future__ import annotations

import re
from pathlib import Path

from fedstream.errors import ConfigError


AXIS_LABELS = {
    "round": "samples seen (rounds)", "interval_error": "error rate per interval", "epoch": "epoch",
    "test_accuracy": "test accuracy", "bytes_total": "bytes sent so far (up + down)", "tick": "ticks",
    "acc": "prequential accuracy",
}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("fedstream report draws with matplotlib; install it with: pip install 'fedstream[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60] or "figure"


def _short(key: str) -> str:
    """A grid key as a panel title: "activation.name" -> "activation", "activation.p" stays."""
    return key.removesuffix(".name")


def _legend(run, skip: set[str]) -> str:
    from fedstream.experiments.report import label

    rest = {k: v for k, v in run.grid.items() if k not in skip}
    return label(rest) if rest else run.name


def curves(plt, exp, fig_def, runs, path: Path) -> None:
    """Interval error against samples seen, one panel per value of ``panels``, one line per run."""
    panel_key = fig_def.panels
    values = list(dict.fromkeys(str(r.grid[panel_key]) for r in runs)) if panel_key else [None]
    fig, axes = plt.subplots(1, len(values), figsize=(4.2 * len(values) + 1, 3.6), sharey=True, squeeze=False)
    for ax, value in zip(axes[0], values):
        members = [r for r in runs if value is None or str(r.grid[panel_key]) == value]
        x_key, y_key = fig_def.axes
        for run in members:
            pts = [(row[x_key], row[y_key]) for row in run.curve if x_key in row and y_key in row]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.2, label=_legend(run, {panel_key}))
        ax.set_title(f"{_short(panel_key)} = {value}" if value is not None else fig_def.title, fontsize=10)
        ax.set_xlabel(AXIS_LABELS.get(x_key, x_key))
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
        if any(line.get_label() for line in ax.get_lines()):
            ax.legend(fontsize=8)
    axes[0][0].set_ylabel(AXIS_LABELS.get(fig_def.axes[1], fig_def.axes[1]))
    if panel_key:
        fig.suptitle(fig_def.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _paper_points(exp) -> dict[str, tuple[float, float]]:
    """{run label: (MB, accumulated error)} of every paper row that reports both."""
    from fedstream.experiments.report import label

    points = {}
    for table in exp.paper:
        if {"total_mb", "accumulated_error"} <= set(table.columns):
            i, j = table.columns.index("total_mb"), table.columns.index("accumulated_error")
            points |= {label(keys): (v[i], v[j]) for keys, v in table.rows if v[i] is not None and v[j] is not None}
    return points


def scatter(plt, exp, fig_def, runs, path: Path, scale_factor: float | None = None) -> None:
    """Total communication (MB) against accumulated error: one colour per run, ours as dots and
    the paper's as crosses. ``scale_factor`` projects our MB to the paper's number of rounds."""
    from fedstream.experiments.report import column_value, label

    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    paper = _paper_points(exp)
    colours = plt.get_cmap("tab10").colors
    for i, run in enumerate(r for r in runs if r.done and r.summary.get("diverged_at") is None):
        colour, name = colours[i % len(colours)], label(run.grid)
        x_key, y_key = fig_def.axes
        x = column_value(run.summary, x_key)
        y = column_value(run.summary, y_key)
        if x is None or y is None:
            continue
        x *= (scale_factor or 1.0) if x_key in ("total_mb", "up_mb", "down_mb") else 1.0
        ax.scatter([x], [y], s=36, color=colour, label=name)
        if name in paper and fig_def.axes == ("total_mb", "accumulated_error"):
            ax.scatter([paper[name][0]], [paper[name][1]], s=44, marker="x", color=colour)
    ax.scatter([], [], marker="o", color="black", label="ours")
    if paper:
        ax.scatter([], [], marker="x", color="black", label="paper")
    ax.set_xscale("log")
    from matplotlib.ticker import NullFormatter

    ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: minor ones overlap
    scaled = f", ours ×{scale_factor:g} to the paper's rounds" if scale_factor else ""
    from fedstream.experiments.report import LABELS

    x_key, y_key = fig_def.axes
    ax.set_xlabel(f"{LABELS.get(x_key, x_key)} (MB = 2^20 bytes, log scale{scaled})" if x_key.endswith("mb")
                  else LABELS.get(x_key, x_key))
    ax.set_ylabel(LABELS.get(y_key, y_key))
    ax.set_title(fig_def.title, fontsize=11)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(exp, runs, folder: Path, scale_factor: float | None = None) -> list[tuple[str, Path]]:
    """Every figure of the definition, as PNG files in ``folder``; returns (title, path) pairs."""
    if not exp.figures:
        return []
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, fig_def in enumerate(exp.figures):
        path = folder / f"{i + 1}-{_slug(fig_def.title)}.png"
        if fig_def.kind == "curves":
            curves(plt, exp, fig_def, runs, path)
        else:
            scatter(plt, exp, fig_def, runs, path, scale_factor)
        out.append((fig_def.title, path))
    return out
