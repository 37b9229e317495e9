"""The ``vfl`` task (batch vertical FL with compression) as the command line, sweeps and
experiments see it."""

from __future__ import annotations

from pathlib import Path

import fedstream.vfl.config as vfl_config
from fedstream.runs.batch import CHECKPOINT, batch_task, common_rows, run_batch
from fedstream.runs.task import Progress, entry_point
from fedstream.transport import CompressionSpec

train = entry_point("fedstream.vfl.trainer:train_config")  # PyTorch is imported on the first run


def simulate(config: dict, out: Path | None = None, progress: Progress | None = None,
             resume: bool = False) -> dict:
    """Train ``config``; with ``out``: config.yaml, metrics.csv, checkpoint.pt (every epoch) and
    summary.json; ``resume``: continue from ``out/checkpoint.pt`` when it exists."""
    return run_batch(config, out, train, progress, resume, checkpoint_name=CHECKPOINT)


def summary_rows(s: dict) -> tuple[str, list[tuple[str, str]]]:
    c = s["config"]
    rows = [("test accuracy (final / best)", f"{s['final_accuracy']:.4f} / {s['best_accuracy']:.4f}"),
            ("epochs", str(s["epochs"])),
            ("compression", compression_line(c))]
    return f"fedstream {s['task']} on {c['data.name']}", rows + common_rows(s)


def compression_line(c: dict) -> str:
    """``up X + cache, down Y`` and the options that are not the paper's defaults."""
    spec = CompressionSpec.from_config(c)
    options = spec.options()
    cache = " + cache" if options.pop("cache", False) else ""
    return f"up {spec.up}{cache}, down {spec.down}" + "".join(f", {k} {v}" for k, v in options.items())


def length(s: dict | None, c: dict, curve: list[dict]) -> str:
    if s is not None and s.get("diverged_at") is not None:
        return "diverged"
    return f"{s['epochs']} epochs" if s else f"{len(curve)} of {c['train.epochs']} epochs (running)"


TASK = batch_task(
    name="vfl",
    doc="batch vertical FL with compression",
    simulate=simulate,
    summary_rows=summary_rows,
    columns=("final_accuracy", "best_accuracy", "total_mb", "up_mb", "down_mb", "bytes_per_client_mb",
             "wall_seconds"),
    length=length,
    # in online-round units, a batch VFL epoch of MNIST is ~60 x 10^4
    cost=lambda c: 6e5 * c["train.epochs"] * (c["data.train_rows"] or 60000) / 60000,
    fields=vfl_config.FIELDS,
    datasets=vfl_config.DATASETS,
    check=vfl_config.check,
    deploy="fedstream.vfl.deploy.adapter",
    predict="fedstream.predict.vfl:predict_vfl",
)
