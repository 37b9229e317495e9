"""What a run writes to ``--out DIR``: resolved config, per-interval CSV, summary, checkpoint."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import yaml

from fedstream.config import nest

METRIC_COLUMNS = [
    "round",
    "interval_error",
    "accumulated_error",
    "bytes_total",
    "client_compute_seconds",
    "wall_seconds",
]


class RunDirectory:
    """Files of one run. Rows are appended and flushed as they are produced."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.checkpoint = self.path / "checkpoint.npz"
        self.metrics = self.path / "metrics.csv"

    def prepare(self, config: dict, rows: list[dict]) -> None:
        """Create the folder, write the resolved config and the metric rows known so far."""
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "config.yaml").write_text(yaml.safe_dump(nest(config), sort_keys=False))
        with open(self.metrics, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=METRIC_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

    def append_row(self, row: dict) -> None:
        with open(self.metrics, "a", newline="") as fh:
            csv.DictWriter(fh, fieldnames=METRIC_COLUMNS).writerow(row)

    def write_summary(self, summary: dict) -> Path:
        path = self.path / "summary.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2))
        os.replace(tmp, path)
        return path
