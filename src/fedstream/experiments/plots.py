"""The PNG figures of a report: prequential error curves and communication-vs-error scatters.

matplotlib is needed only here (``pip install 'fedstream[report]'``); it draws off-screen (Agg).
"""

from __future__ import annotations

import re
from pathlib import Path

from fedstream.errors import ConfigError


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
        for run in members:
            pts = [(row["round"], row["interval_error"]) for row in run.curve if "interval_error" in row]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.2, label=_legend(run, {panel_key}))
        ax.set_title(f"{panel_key.split('.')[-1]} = {value}" if value is not None else fig_def.title, fontsize=10)
        ax.set_xlabel("samples seen (rounds)")
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 3))
        if any(line.get_label() for line in ax.get_lines()):
            ax.legend(fontsize=8)
    axes[0][0].set_ylabel("error rate per interval")
    if panel_key:
        fig.suptitle(fig_def.title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _paper_points(exp) -> list[tuple[float, float, str]]:
    """(MB, accumulated error, label) of every paper row that reports both."""
    from fedstream.experiments.report import label

    points = []
    for table in exp.paper:
        if {"total_mb", "accumulated_error"} <= set(table.columns):
            i, j = table.columns.index("total_mb"), table.columns.index("accumulated_error")
            points += [(v[i], v[j], label(keys)) for keys, v in table.rows if v[i] is not None and v[j] is not None]
    return points


def scatter(plt, exp, fig_def, runs, path: Path) -> None:
    """Total communication (MB) against accumulated error, one labelled point per finished run."""
    from fedstream.experiments.report import column_value

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    done = [r for r in runs if r.done]
    for run in done:
        x, y = column_value(run.summary, "total_mb"), column_value(run.summary, "accumulated_error")
        ax.scatter([x], [y], s=30, color="tab:blue", label="ours" if run is done[0] else None)
        ax.annotate(_legend(run, set()), (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    for i, (x, y, name) in enumerate(_paper_points(exp)):
        ax.scatter([x], [y], s=34, marker="x", color="tab:red", label="paper" if i == 0 else None)
        ax.annotate(name, (x, y), fontsize=7, color="tab:red", xytext=(4, -9), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("total communication (MB = 2^20 bytes, log scale)")
    ax.legend(fontsize=8)
    ax.set_ylabel("accumulated error rate")
    ax.set_title(fig_def.title, fontsize=11)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw(exp, runs, folder: Path) -> list[tuple[str, Path]]:
    """Every figure of the definition, as PNG files in ``folder``; returns (title, path) pairs."""
    if not exp.figures:
        return []
    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i, fig_def in enumerate(exp.figures):
        path = folder / f"{i + 1}-{_slug(fig_def.title)}.png"
        (curves if fig_def.kind == "curves" else scatter)(plt, exp, fig_def, runs, path)
        out.append((fig_def.title, path))
    return out
