"""Run a resolved config of the batch tasks: ``vfl`` (batch VFL with compression) and ``chfl``.

Online VFL (``task = "ovfl"``) has its own engine, with chunked streams, checkpoints and resume
(:mod:`fedstream.vfl.engine`). The batch tasks are run here, so that ``fedstream run``, the sweep
and the experiment runner call them the same way: one config in, ``summary.json`` (with the
resolved ``config``) and ``metrics.csv`` out.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from pathlib import Path

import yaml

from fedstream.config import nest
from fedstream.config.loader import number_list
from fedstream.errors import ConfigError, DivergedError, NonFiniteError

BATCH_TASKS = ("vfl", "chfl")


def chfl_settings(config: dict):
    """The CHFL settings of a ``task = "chfl"`` config (batch mode)."""
    from fedstream.hfl.settings import CHFLSettings

    return CHFLSettings(
        dataset=config["data.name"], clients=config["hfl.clients"], common_ratio=config["hfl.common_ratio"],
        split=config["hfl.split"], split_index=config["hfl.split_index"], hidden=number_list(config["hfl.hidden"], int),
        rounds=config["hfl.rounds"], local_epochs=config["hfl.local_epochs"], batch_size=config["hfl.batch_size"],
        lrs=number_list(config["hfl.lrs"]), mus=number_list(config["hfl.mus"]), prox_mu=config["hfl.prox_mu"],
        max_rows=config["hfl.max_rows"],
    )


def stream_settings(config: dict):
    """The streaming-CHFL settings of a ``task = "chfl"``, ``hfl.mode = "stream"`` config."""
    from fedstream.hfl.stream import StreamSettings

    return StreamSettings(
        dataset=config["data.name"], clients=config["hfl.clients"], common_ratio=config["hfl.common_ratio"],
        split_index=config["hfl.split_index"], hidden=number_list(config["hfl.hidden"], int),
        batch=config["online.batch"], sync_every=config["online.sync_every"], lr=config["online.lr"],
        mu=config["online.mu"], prox_mu=config["hfl.prox_mu"], late_join=config["online.late_join"],
        eval_every=config["online.eval_every"], max_rows=config["hfl.max_rows"],
    )


def _write(folder: Path, name: str, text: str) -> None:
    tmp = folder / (name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, folder / name)


def _curve_rows(result: dict) -> list[dict]:
    """metrics.csv rows of a CHFL result: the stream's accuracy curve, or one row per client."""
    if "curve" in result:
        return [{k: v for k, v in point.items() if not isinstance(v, (list, dict))} for point in result["curve"]]
    return [{"client": m, "test_acc": acc} for m, acc in enumerate(result.get("test_acc_per_client", []))]


def run_batch_task(config: dict, out: Path | None = None, progress: Callable[[dict], None] | None = None) -> dict:
    """Run a ``vfl`` or ``chfl`` config; with ``out``, write config.yaml, metrics.csv, summary.json."""
    task = config["task"]
    if task not in BATCH_TASKS:
        raise ValueError(f"run_batch_task runs {BATCH_TASKS}, not {task!r}")
    if out is not None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            _write(out, "config.yaml", yaml.safe_dump(nest(config), sort_keys=False))
        except OSError as exc:
            raise ConfigError(f"{out}: cannot write the run's folder ({exc.strerror or exc})") from None
    try:
        result = _train(task, config, out, progress)
    except NonFiniteError as exc:  # both sides are our parties: the numbers blew up
        raise DivergedError(f"training diverged: {exc} (optimizer.lr = {config.get('optimizer.lr')}; "
                            "try a smaller one)", 0) from exc
    summary = result | {"task": task, "config": dict(config)}
    if out is not None:
        if task == "chfl":
            _write_curve(out, result)
        _write(out, "summary.json", json.dumps(summary, indent=2, default=str))
    return summary


def _write_curve(out: Path, result: dict) -> None:
    rows = _curve_rows(result)
    if rows:
        with open(out / "metrics.csv", "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def _train(task: str, config: dict, out: Path | None, progress) -> dict:
    """The task's trainer on ``config``: its result dict."""
    if task == "vfl":
        from fedstream.vfl.batch.settings import BatchVFLSettings
        from fedstream.vfl.batch.trainer import run_batch_vfl

        result = run_batch_vfl(BatchVFLSettings.from_config(config), config["data.root"], seed=config["seed"],
                               progress=progress, out=out)  # writes metrics.csv as epochs finish
    elif config["hfl.mode"] == "stream":
        from fedstream.hfl.stream import run_stream

        result = run_stream(stream_settings(config), config["data.root"], method=config["hfl.method"],
                            seed=config["seed"])
    else:
        from fedstream.hfl.trainer import run_chfl

        result = run_chfl(chfl_settings(config), config["data.root"], method=config["hfl.method"],
                          seed=config["seed"], progress=progress)
    return result
