"""Runs logged to MLflow: ``fedstream run|experiment run ... --track mlflow`` (or ``track.uri``).

What a run folder holds becomes an MLflow run (:func:`log_run_folder`):

* params: the resolved config, one param per key (``optimizer.lr``, ``model.client``, ...; none as
  ``none``);
* metrics: every row of ``metrics.csv`` (an evaluation interval of ovfl, an epoch of vfl, a FedAvg
  round of chfl) at its step, the row's ``round`` (else ``epoch``, ``tick``); a chfl batch run's
  rows of each learning rate are their own series (``val_acc.lr=0.003``);
* the summary's numbers (``bytes.up``, ``bytes.total``, ``wall_seconds``, ``rounds_per_second``,
  ``final_accuracy``, ...) at the last step;
* artifacts: ``summary.json``, ``metrics.csv`` and ``config.yaml``.

An experiment (:func:`log_experiment`) is a parent run holding the report (``report.md`` and its
PNG figures) with one child run per run folder (tuning runs included, tagged ``fedstream.stage``).

The store is ``track.uri``: by default MLflow's own (``$MLFLOW_TRACKING_URI``, else
``sqlite:///mlflow.db`` in the current folder, which ``mlflow ui`` opens with no arguments); a
folder or ``file:`` URI is MLflow's file store, ``http(s)://`` a tracking server. Logging happens
when the run (or experiment) ends, from its files, so a resumed run is logged whole.

MLflow is an extra (``pip install 'fedstream[mlflow]'``); without it ``--track mlflow`` is one
error before anything runs.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from fedstream.errors import FedstreamError

EXPERIMENT = "fedstream"  # the MLflow experiment when track.experiment is not set
STEP_COLUMNS = ("round", "epoch", "tick")  # the first of these a metrics.csv has is the step
SERIES_COLUMNS = ("lr",)  # columns that tell a row's series apart (chfl: one federation per lr)
FILES = ("summary.json", "metrics.csv", "config.yaml")
BATCH = 100  # params per log_batch call (MLflow's limit); metrics go 1000 at a time


class TrackingError(FedstreamError):
    """MLflow is missing, or its store cannot be opened or written."""


def take_settings(config: dict, flag: str | None) -> tuple[bool, str | None, str]:
    """(whether to track, the URI, the experiment) from ``--track`` (``flag``) and the config's
    ``track.*`` keys, which are taken out of ``config``: where a run is logged is not part of the run
    (a resume may log elsewhere). TrackingError now if tracking is asked for and MLflow is missing."""
    uri = config.pop("track.uri", None)
    experiment = config.pop("track.experiment", None) or EXPERIMENT
    on = flag == "mlflow" or uri is not None
    if on:
        check_available()
    return on, uri, experiment


def client(uri: str | None):
    """An ``MlflowClient`` on ``uri`` (None: MLflow's default store); TrackingError without MLflow."""
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise TrackingError("--track mlflow needs MLflow: pip install 'fedstream[mlflow]' (or pip install "
                            "mlflow)") from None
    if uri is not None and _is_file_store(uri):
        # the file store is in maintenance mode in MLflow 3 and refused unless asked for: it is asked for
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        if "://" not in uri:
            uri = Path(uri).resolve().as_uri()
    return MlflowClient(tracking_uri=uri)


def open_store(uri: str | None, experiment: str):
    """:func:`client` on ``uri`` with ``experiment`` made; TrackingError naming the URI if the store
    cannot be opened (before a run starts)."""
    check_available()
    try:
        mlflow = client(uri)
        experiment_id(mlflow, experiment)
    except Exception as exc:  # noqa: BLE001 - MLflow's errors differ per store kind
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise TrackingError(f"track.uri = {uri or 'MLflow default'}: cannot open the MLflow store "
                            f"({type(exc).__name__}: {first})") from None
    return mlflow


def check_available() -> None:
    """TrackingError now if MLflow is not installed (before a run starts)."""
    try:
        import mlflow.tracking  # noqa: F401
    except ImportError:
        raise TrackingError("--track mlflow needs MLflow: pip install 'fedstream[mlflow]' (or pip install "
                            "mlflow)") from None


def _is_file_store(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri and not uri.startswith(("sqlite:", "databricks"))


def experiment_id(mlflow, name: str) -> str:
    """The id of experiment ``name``, created if absent."""
    found = mlflow.get_experiment_by_name(name)
    return found.experiment_id if found is not None else mlflow.create_experiment(name)


def params_of(config: dict) -> dict[str, str]:
    """The config as MLflow params: strings, none as ``none``, booleans as ``true`` / ``false``."""
    def text(v: Any) -> str:
        if v is None:
            return "none"
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)
    return {k: text(v) for k, v in config.items()}


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def metric_rows(path: Path) -> list[tuple[int, dict[str, float]]]:
    """``metrics.csv`` as (step, {metric: value}) rows (module doc: the step and series columns)."""
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return []
    columns = list(rows[0])
    step = next((c for c in STEP_COLUMNS if c in columns), None)
    series = [c for c in SERIES_COLUMNS if c in columns]
    out = []
    for i, row in enumerate(rows):
        at = _number(row.get(step, "")) if step else None
        suffix = "".join(f".{c}={row[c]}" for c in series)
        values = {f"{k}{suffix}": v for k, text in row.items()
                  if k not in (step, *series) and k is not None and (v := _number(text)) is not None}
        out.append((int(at) if at is not None else i, values))
    return out


def summary_metrics(summary: dict, prefix: str = "") -> dict[str, float]:
    """The summary's numbers (nested keys joined by '.'), its config and lists left out."""
    out: dict[str, float] = {}
    for key, value in summary.items():
        if key == "config":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= summary_metrics(value, name + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def log_run_folder(mlflow, folder: Path, *, experiment: str, run_name: str, config: dict | None = None,
                   tags: dict[str, str] | None = None, parent: str | None = None) -> str:
    """Log a run folder (module doc) as one finished MLflow run; returns its id. ``config``: the
    resolved config (default: the summary's)."""
    from mlflow.entities import Metric, Param, RunTag

    summary = _read_json(folder / "summary.json")
    config = config if config is not None else (summary or {}).get("config", {})
    all_tags = {"fedstream.folder": str(folder.resolve()), "fedstream.task": str(config.get("task", ""))}
    all_tags |= tags or {}
    if parent is not None:
        all_tags["mlflow.parentRunId"] = parent
    run = mlflow.create_run(experiment_id(mlflow, experiment), run_name=run_name, tags=all_tags)
    rid = run.info.run_id
    try:
        params = [Param(k, v) for k, v in params_of(config).items()]
        for i in range(0, len(params), BATCH):
            mlflow.log_batch(rid, params=params[i:i + BATCH])
        now = int(time.time() * 1000)
        rows = metric_rows(folder / "metrics.csv")
        metrics = [Metric(k, v, now, step) for step, values in rows for k, v in values.items()]
        last = max((step for step, _ in rows), default=0)
        metrics += [Metric(k, v, now, last) for k, v in summary_metrics(summary or {}).items()]
        for i in range(0, len(metrics), 1000):
            mlflow.log_batch(rid, metrics=metrics[i:i + 1000])
        mlflow.log_batch(rid, tags=[RunTag("fedstream.finished", "true" if summary else "false")])
        for name in FILES:
            if (folder / name).is_file():
                mlflow.log_artifact(rid, str(folder / name))
    except Exception:
        mlflow.set_terminated(rid, "FAILED")
        raise
    mlflow.set_terminated(rid, "FINISHED" if summary else "KILLED")
    return rid


def log_experiment(mlflow, folder: Path, *, experiment: str, report: Path | None = None) -> str:
    """Log an experiment folder: a parent run (the report's ``report.md`` and figures as artifacts)
    with a child run per run folder, tuning runs tagged ``fedstream.stage = tuning``. Returns the
    parent's id."""
    index = _read_json(folder / "experiment.json") or {}
    name = str(index.get("experiment", folder.name))
    parent = mlflow.create_run(experiment_id(mlflow, experiment), run_name=name,
                               tags={"fedstream.folder": str(folder.resolve()), "fedstream.experiment": name,
                                     "fedstream.scale": str(index.get("scale", ""))})
    pid = parent.info.run_id
    try:
        overrides = index.get("overrides") or {}
        if overrides:
            from mlflow.entities import Param
            mlflow.log_batch(pid, params=[Param(k, v) for k, v in params_of(overrides).items()][:BATCH])
        for stage in ("tuning", "runs"):
            for run_dir in sorted(p for p in (folder / stage).glob("*") if p.is_dir()):
                log_run_folder(mlflow, run_dir, experiment=experiment, run_name=f"{name}/{run_dir.name}",
                               tags={"fedstream.stage": stage, "fedstream.experiment": name}, parent=pid)
        for path in [folder / "experiment.json", folder / "tuning.json"]:
            if path.is_file():
                mlflow.log_artifact(pid, str(path))
        if report is not None and report.is_file():
            mlflow.log_artifact(pid, str(report))
            for figure in sorted((report.parent / "figures").glob("*.png")):
                mlflow.log_artifact(pid, str(figure), "figures")
    except Exception:
        mlflow.set_terminated(pid, "FAILED")
        raise
    mlflow.set_terminated(pid, "FINISHED")
    return pid


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
