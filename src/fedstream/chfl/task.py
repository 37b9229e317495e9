"""The ``chfl`` task (continual horizontal FL, batch or stream mode) as the command line, sweeps and
experiments see it."""

from __future__ import annotations

from pathlib import Path

import fedstream.chfl.config as chfl_config
from fedstream.runs.batch import CHECKPOINT, batch_task, common_rows, run_batch
from fedstream.runs.task import Progress, entry_point

train = entry_point("fedstream.chfl.runner:train")  # PyTorch is imported on the first run




def simulate(config: dict, out: Path | None = None, progress: Progress | None = None,
             resume: bool = False) -> dict:
    """Run ``config``; with ``out``: config.yaml, metrics.csv (rows as produced), checkpoint.pt
    (every FedAvg round; once summary.json is written, the last one becomes model.pt, the final
    model that ``fedstream predict`` loads); ``resume``: continue from it."""
    return run_batch(config, out, train, progress, resume, checkpoint_name=CHECKPOINT,
                     discard_checkpoint=True, final_name="model.pt")


def summary_rows(s: dict) -> tuple[str, list[tuple[str, str]]]:
    c = s["config"]
    if "prequential_acc" in s:
        rows = [("method", f"{c['chfl.method']} (stream)"),
                ("prequential accuracy", f"{s['prequential_acc']:.4f}")]
    else:
        rows = [("method", c["chfl.method"]), ("test accuracy (mean over clients)", f"{s['test_acc']:.4f}")]
    return f"fedstream {s['task']} on {c['data.name']}", rows + common_rows(s)


def length(s: dict | None, c: dict, curve: list[dict]) -> str:
    if s is not None and s.get("diverged_at") is not None:
        return "diverged"
    return "done" if s else "running"


TASK = batch_task(
    name="chfl",
    doc="continual horizontal FL",
    simulate=simulate,
    summary_rows=summary_rows,
    columns=("test_acc", "prequential_acc", "total_mb", "up_mb", "down_mb", "wall_seconds"),
    length=length,
    cost=lambda c: 1e5 * c["chfl.rounds"] * c["chfl.clients"],  # a CHFL round ~10^5 online rounds
    fields=chfl_config.FIELDS,
    datasets=chfl_config.DATASETS,
    check=chfl_config.check,
    deploy="fedstream.chfl.deploy.adapter",
    predict="fedstream.predict.chfl:predict_chfl",
)
