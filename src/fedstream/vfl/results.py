"""What a batch VFL run reports: the metrics.csv columns, the summary, and their writer."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import fedstream
from fedstream.metrics.collapse import collapse_fields
from fedstream.runs.folder import RunFolder
from fedstream.vfl.checkpoint import NAME
from fedstream.vfl.settings import BatchVFLSettings

COLUMNS = ["epoch", "steps", "train_loss", "test_accuracy", "bytes_up", "bytes_down", "bytes_total",
           "eval_bytes_up", "epoch_seconds", "wall_seconds", "train_accuracy", "test_loss", "top_class_share",
           "label_top_class_share"]  # top_class_share: of the test predictions (fedstream.metrics.collapse)

def make_summary(settings: BatchVFLSettings, seed: int, rows: list[dict], ledger: dict, wall: float) -> dict:
    """The run's summary: settings, final and best accuracy, per-epoch rows, bytes, timings."""
    accuracies = [r["test_accuracy"] for r in rows]
    per_client = [c["up"] + c["down"] for c in ledger["per_client"]]
    return {
        "task": "vfl",
        "config": settings.to_config() | {"seed": seed},
        "epochs": len(rows),
        "final_accuracy": accuracies[-1],
        "best_accuracy": max(accuracies),
        # best so far over the epochs (the Dynamic VF-PS report's tables): highest accuracies, lowest losses
        "best_train_accuracy": _best(rows, "train_accuracy", max),
        "best_train_loss": _best(rows, "train_loss", min),
        "best_test_loss": _best(rows, "test_loss", min),
        "per_epoch": rows,
        "bytes": ledger,
        "bytes_per_client": sum(per_client) / len(per_client),  # the paper's Table 2 traffic measure
        "eval_bytes_up": sum(r["eval_bytes_up"] for r in rows),
        "wall_seconds": wall,
        "fedstream_version": fedstream.__version__,
    } | _collapse(rows[-1])


def _collapse(last: dict) -> dict:
    """The collapse fields of the last epoch's test predictions (none from rows before they were recorded)."""
    if "top_class_share" not in last:
        return {}
    return collapse_fields(last["top_class_share"], last["label_top_class_share"],
                           f"the test rows of epoch {last['epoch']}")


def _best(rows: list[dict], key: str, pick) -> float | None:
    values = [r[key] for r in rows if r[key] == r[key]]  # epochs without training rows have NaN
    return pick(values) if values else None


class MetricsWriter:
    """``metrics.csv`` rows appended as produced and ``summary.json`` written atomically, in the run
    folder (:class:`~fedstream.runs.folder.RunFolder`); no-ops without a folder.

    Columns: :data:`COLUMNS`, then ``extra`` (the selection columns of a run that selects)."""

    def __init__(self, folder: Path | None, extra: list[str] = (), rows: list[dict] = ()):
        """Start ``metrics.csv`` with the header and ``rows`` (a resumed run's epochs done; rows a crash
        left after the checkpoint are dropped)."""
        self.columns = COLUMNS + list(extra)
        self.folder = None if folder is None else RunFolder(folder, checkpoint_name=NAME,
                                                            columns=self.columns)
        if self.folder is not None:
            self.folder.start_metrics(rows)

    def append(self, row: dict) -> None:
        if self.folder is not None:
            self.folder.append_row(row)

    def summary(self, summary: dict) -> None:
        if self.folder is not None:
            self.folder.write_summary(summary, default=_json_default)


def _json_default(value):
    return asdict(value) if hasattr(value, "__dataclass_fields__") else str(value)
