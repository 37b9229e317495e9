"""What a run writes to ``--out DIR``: resolved config, metrics rows, summary, checkpoint, lock.

Every task, the sweeps and the experiments write their run folders through :class:`RunFolder`:
``config.yaml`` (the resolved config), ``metrics.csv`` (a header, then one row per evaluation,
appended and flushed as it is produced), ``summary.json`` (written atomically at the end) and the
task's checkpoint (``checkpoint.npz`` for online VFL, ``checkpoint.pt`` for batch VFL and CHFL).
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedstream.errors import ConfigError, DivergedError
from fedstream.fields import nest
from fedstream.runs.files import atomic_open, atomic_write, output_error, remove_stale_temporaries

METRIC_COLUMNS = [
    "round",
    "interval_error",
    "accumulated_error",
    "bytes_total",
    "client_compute_seconds",
    "wall_seconds",
    "client_cpu_seconds",
    "top_class_share",
]  # online VFL's metrics.csv (client_compute_seconds: wall-clock; client_cpu_seconds: thread CPU time;
# top_class_share: the share of the interval's predictions that went to its most-predicted class)
LOCK = ".lock"


def diverged_fields(exc: DivergedError) -> dict:
    """What the summary.json of a diverged run adds (every task): ``diverged: true``, the round
    where it was detected (``diverged_at``: a round for online VFL, 0 for the batch tasks) and the
    message (``error``)."""
    return {"diverged": True, "diverged_at": exc.round, "error": str(exc)}


class RunFolder:
    """Files of one run in ``path``. ``checkpoint_name``: the task's checkpoint file;
    ``columns``: the metrics.csv columns (online VFL's by default)."""

    def __init__(self, path: str | os.PathLike[str], *, checkpoint_name: str = "checkpoint.npz",
                 columns: Sequence[str] = METRIC_COLUMNS):
        self.path = Path(path)
        self.checkpoint = self.path / checkpoint_name
        self.metrics = self.path / "metrics.csv"
        self.summary = self.path / "summary.json"
        self.columns = list(columns)
        self._lock: int | None = None

    def create(self) -> None:
        """Make the folder; ConfigError naming it if it cannot be made."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot write the run's folder ({exc.strerror or exc})") from None

    def write_config(self, config: dict) -> None:
        """``config.yaml``: the resolved flat config, nested."""
        self.create()
        atomic_write(self.path / "config.yaml", yaml.safe_dump(nest(config), sort_keys=False))

    def prepare(self, config: dict, rows: Iterable[dict]) -> None:
        """Create the folder, write the resolved config and the metric rows known so far."""
        self.write_config(config)
        self.start_metrics(rows)

    def start_metrics(self, rows: Iterable[dict] = ()) -> None:
        """``metrics.csv`` anew: the header and ``rows`` (a resumed run's rows up to its checkpoint)."""
        self.create()
        with atomic_open(self.metrics, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)

    def append_row(self, row: dict) -> None:
        """One metrics row, appended and flushed at once."""
        try:
            with open(self.metrics, "a", newline="") as fh:
                csv.DictWriter(fh, fieldnames=self.columns).writerow(row)
        except OSError as exc:
            raise output_error(self.metrics, exc) from None

    def write_summary(self, summary: dict, default: Callable[[Any], Any] | None = None) -> Path:
        """``summary.json``, atomically (``default``: as for :func:`json.dumps`); return its path."""
        return atomic_write(self.summary, json.dumps(summary, indent=2, default=default))

    def read_summary(self) -> dict | None:
        """The summary.json of a finished run, or None; ConfigError if it is not valid JSON."""
        if not self.summary.exists():
            return None
        try:
            return json.loads(self.summary.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{self.summary}: not valid JSON ({exc}); delete it to rerun that run"
            ) from None

    # -- the lock: one process writes a run folder at a time ------------------------------------
    def lock(self) -> None:
        """Hold the folder's lock until :meth:`unlock` or the end of this process; ConfigError
        naming the process that holds it if another one does. The lock file keeps the holder's PID."""
        if self._lock is not None:
            return
        self.create()
        try:
            fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise output_error(self.path / LOCK, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(f"{self.path} is in use by another run (process {holder}); wait for it to "
                              "end or choose another --out") from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
        except OSError as exc:
            os.close(fd)
            raise output_error(self.path / LOCK, exc) from None
        self._lock = fd
        remove_stale_temporaries(self.path)  # left by a process killed mid-write

    def unlock(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> RunFolder:
        self.lock()
        return self

    def __exit__(self, *exc) -> None:
        self.unlock()
