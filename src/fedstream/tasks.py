"""Run a resolved config of the batch tasks: ``vfl`` (batch VFL with compression) and ``chfl``.

Online VFL (``task = "ovfl"``) has its own engine, with chunked streams, checkpoints and resume
(:mod:`fedstream.vfl.engine`). The batch tasks are run here, so that ``fedstream run``, the sweep
and the experiment runner call them the same way: one config in, ``summary.json`` (with the
resolved ``config``) and ``metrics.csv`` out.
"""

from __future__ import annotations

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
        shared_baselines=tuple(b.strip() for b in config["hfl.baselines"].split(",") if b.strip()),
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


def run_batch_task(config: dict, out: Path | None = None, progress: Callable[[dict], None] | None = None,
                   resume: bool = False) -> dict:
    """Run a ``vfl`` or ``chfl`` config; with ``out``, write config.yaml, metrics.csv, summary.json.

    ``resume`` (with ``out``): continue from ``out/checkpoint.pt`` when it exists (batch VFL
    checkpoints every epoch, CHFL every FedAvg round; a finished CHFL run deletes its checkpoint)."""
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
        result = _train(task, config, out, progress, resume and out is not None)
    except NonFiniteError as exc:  # both sides are our parties: the numbers blew up
        raise DivergedError(f"training diverged: {exc} (optimizer.lr = {config.get('optimizer.lr')}; "
                            "try a smaller one)", 0) from exc
    summary = result | {"task": task, "config": dict(config)}
    if out is not None:  # CHFL wrote metrics.csv as it went
        _write(out, "summary.json", json.dumps(summary, indent=2, default=str))
        if task == "chfl":
            (out / "checkpoint.pt").unlink(missing_ok=True)  # finished: the summary marks it
    return summary


def _train(task: str, config: dict, out: Path | None, progress, resume: bool = False) -> dict:
    """The task's trainer on ``config``: its result dict."""
    if task == "vfl":
        from fedstream.vfl.batch.settings import BatchVFLSettings
        from fedstream.vfl.batch.trainer import run_batch_vfl

        result = run_batch_vfl(BatchVFLSettings.from_config(config), config["data.root"], seed=config["seed"],
                               progress=progress, out=out, resume=resume)  # metrics.csv, checkpoint.pt per epoch
    elif config["hfl.mode"] == "stream":
        from fedstream.hfl.settings import named_by_config
        from fedstream.hfl.stream import run_stream

        with named_by_config():  # errors name hfl.* / online.* keys, not settings fields
            result = run_stream(stream_settings(config), config["data.root"], method=config["hfl.method"],
                                seed=config["seed"], run_dir=out, resume=resume)
    else:
        from fedstream.hfl.settings import named_by_config
        from fedstream.hfl.trainer import run_chfl

        with named_by_config():
            result = run_chfl(chfl_settings(config), config["data.root"], method=config["hfl.method"],
                              seed=config["seed"], progress=progress, run_dir=out, resume=resume)
    return result
