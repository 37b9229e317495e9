"""The ``ovfl`` task (event-driven online vertical FL) as the command line, sweeps and experiments see it."""

from __future__ import annotations

from pathlib import Path

import fedstream.ovfl.config as ovfl_config
from fedstream.errors import ConfigError, DivergedError
from fedstream.ovfl.engine import OnlineVFL
from fedstream.ovfl.stack import config_stack_key
from fedstream.ovfl.sweep import run_online, warm
from fedstream.runs.folder import RunFolder, diverged_fields
from fedstream.runs.task import Progress, Task

CHECKPOINT = "checkpoint.npz"


def simulate(config: dict, out: Path | None = None, progress: Progress | None = None,
             resume: bool = False) -> dict:
    """Run ``config`` in the simulator; with ``out``, the run folder (resumed from its checkpoint
    with ``resume``). The summary has ``output`` (the summary.json path) when written."""
    run = OnlineVFL(config)
    folder = RunFolder(out, checkpoint_name=CHECKPOINT) if out is not None else None
    if folder is not None:
        if resume:
            run.load(folder.checkpoint)
        folder.prepare(config, run.interval_rows)

    def on_progress(r: OnlineVFL) -> None:
        progress({"event": "round", "round": r.t, "rounds": config["rounds"],
                  "error": r.metrics.current_interval_error})

    if progress is not None:
        on_progress(run)
    try:
        summary = run.run(
            on_progress=on_progress if progress is not None else None,
            on_interval=folder.append_row if folder else None,
            checkpoint_path=folder.checkpoint if folder else None,
            checkpoint_every=config["checkpoint.every"],
        )
    except DivergedError as exc:  # the summary says so, then the command fails with the message
        if folder is not None:
            folder.write_summary(run.summary() | diverged_fields(exc))
        raise
    if folder is not None:
        summary["output"] = str(folder.write_summary(summary))
    return summary


def title(config: dict) -> str:
    act = config["activation.name"]
    return f"{config['optimizer.name'].upper()}-{act.capitalize()} on {config['data.name']}"


def summary_rows(s: dict) -> tuple[str, list[tuple[str, str]]]:
    """The title and rows of the CLI's table after a run."""
    b = s["bytes"]
    rows = [
        ("accumulated error", f"{s['accumulated_error']:.4f}"),
        ("last interval error", f"{s['interval_errors'][-1]:.4f}" if s["interval_errors"] else "-"),
        (
            "communication (MB, 2^20 B)",
            f"{b['total'] / 2**20:,.2f}  (up {b['up'] / 2**20:,.2f}, down {b['down'] / 2**20:,.2f})",
        ),
        ("activation rate per client", " ".join(f"{r:.3f}" for r in s["activation_rate"])),
        ("client compute, wall / CPU (s)",
         f"{s['client_compute_seconds']:.2f} / {s.get('client_cpu_seconds', float('nan')):.2f}"),
        ("server compute, wall / CPU (s)",
         f"{s['server_compute_seconds']:.2f} / {s.get('server_cpu_seconds', float('nan')):.2f}"),
        ("wall time (s)", f"{s['wall_seconds']:.1f}"),
        ("rounds / s", f"{s['rounds_per_second']:,.0f}"),
        compile_row(s),
    ]
    if "output" in s:
        rows.append(("summary", s["output"]))
    return f"fedstream {s['task']}: {title(s['config'])}, {s['rounds']:,} rounds", rows


def compile_row(s: dict) -> tuple[str, str]:
    """The summary table's row of numba's compilation, which the wall time and rate leave out."""
    seconds = s.get("compile_seconds", 0.0)
    if seconds > 0:
        return "compiling kernels (s), apart", f"{seconds:.1f}, once per machine"
    return "compiling kernels (s), apart", "0, cached"


def index_fields(r: dict) -> dict:
    return {"rounds": r["rounds"], "bytes_total": r["bytes"]["total"],
            "activation_rate": r["activation_rate"]}


def length(s: dict | None, c: dict, curve: list[dict]) -> str:
    if s is None:
        last = int(curve[-1]["round"]) if curve else 0
        return f"{last} of {c['rounds']} rounds (running)"
    if s.get("diverged_at") is not None:
        return f"diverged at round {s['diverged_at']}"
    return f"{s['rounds']} rounds"


def finished(summary: dict, config: dict) -> bool:
    return summary.get("rounds") == config["rounds"] or summary.get("diverged_at") is not None


def planned_rounds(c: dict) -> int:
    """``rounds``, which a sweep must know before it runs (a table's default is known only once read)."""
    if c["rounds"] is None:
        raise ConfigError('rounds: a sweep over data.name = "table" needs rounds set (--set rounds=N); '
                          "its default, rows x stream.passes, is known only once the table is read")
    return c["rounds"]


def cost(c: dict) -> float:
    """SLR embeds l samples per round; the unit is one online round."""
    per_round = 1.0 + (0.35 * c["optimizer.window"] if c["optimizer.name"] == "slr" else 0.0)
    return per_round * planned_rounds(c)


TASK = Task(
    name="ovfl",
    doc="event-driven online vertical FL",
    simulate=simulate,
    run_many=run_online,
    warm=warm,
    checkpoint_name=CHECKPOINT,
    refuse_fresh=("summary.json", CHECKPOINT),
    resume_needs_checkpoint=False,  # the engine's loader says "no checkpoint to resume from"
    title=title,
    summary_rows=summary_rows,
    columns=("accumulated_error", "client_compute_seconds", "total_mb", "up_mb", "down_mb",
             "mean_activation_rate", "rounds_per_second"),
    index_fields=index_fields,
    length=length,
    finished=finished,
    cost=cost,
    units=lambda c: planned_rounds(c),
    tuning=lambda c, rounds: {"rounds": rounds, "checkpoint.every": 0},  # a shorter run per candidate
    fields=ovfl_config.FIELDS,
    datasets=ovfl_config.DATASETS,
    check=ovfl_config.check,
    stack_key=config_stack_key,
    deploy="fedstream.ovfl.deploy.adapter",
    predict="fedstream.predict.ovfl:predict_ovfl",
)
