"""Run a resolved config of the batch tasks: ``vfl`` (batch VFL with compression) and ``chfl``.

Online VFL (``task = "ovfl"``) has its own engine, with chunked streams, checkpoints and resume
(:mod:`fedstream.ovfl.engine`). The batch tasks are run here, so that ``fedstream run``, the sweep
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
    from fedstream.chfl.settings import CHFLSettings

    return CHFLSettings(
        dataset=config["data.name"],
        clients=config["chfl.clients"],
        common_ratio=config["chfl.common_ratio"],
        split=config["chfl.split"],
        split_index=config["chfl.split_index"],
        hidden=number_list(config["chfl.hidden"], int),
        rounds=config["chfl.rounds"],
        local_epochs=config["chfl.local_epochs"],
        batch_size=config["chfl.batch_size"],
        lrs=number_list(config["chfl.lrs"]),
        mus=number_list(config["chfl.mus"]),
        prox_mu=config["chfl.prox_mu"],
        max_rows=config["chfl.max_rows"],
        shared_baselines=tuple(b.strip() for b in config["chfl.baselines"].split(",") if b.strip()),
    )


def stream_settings(config: dict):
    """The streaming-CHFL settings of a ``task = "chfl"``, ``chfl.mode = "stream"`` config."""
    from fedstream.chfl.stream import StreamSettings

    return StreamSettings(
        dataset=config["data.name"],
        clients=config["chfl.clients"],
        common_ratio=config["chfl.common_ratio"],
        split_index=config["chfl.split_index"],
        hidden=number_list(config["chfl.hidden"], int),
        batch=config["chfl.stream_batch"],
        sync_every=config["chfl.stream_sync_every"],
        lr=config["chfl.stream_lr"],
        mu=config["chfl.stream_mu"],
        prox_mu=config["chfl.prox_mu"],
        late_join=config["chfl.stream_late_join"],
        eval_every=config["chfl.stream_eval_every"],
        max_rows=config["chfl.max_rows"],
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
        from fedstream.vfl.settings import BatchVFLSettings
        from fedstream.vfl.trainer import run_batch_vfl

        result = run_batch_vfl(
            BatchVFLSettings.from_config(config),
            config["data.root"],
            seed=config["seed"],
            progress=progress,
            out=out,
            resume=resume,
        )  # metrics.csv, checkpoint.pt per epoch
    elif config["chfl.mode"] == "stream":
        from fedstream.chfl.settings import named_by_config
        from fedstream.chfl.stream import run_stream

        with named_by_config():  # errors name chfl.* keys, not settings fields
            result = run_stream(stream_settings(config), config["data.root"], method=config["chfl.method"],
                                seed=config["seed"], run_dir=out, resume=resume)
    else:
        from fedstream.chfl.settings import named_by_config
        from fedstream.chfl.trainer import run_chfl

        with named_by_config():
            result = run_chfl(chfl_settings(config), config["data.root"], method=config["chfl.method"],
                              seed=config["seed"], progress=progress, run_dir=out, resume=resume)
    return result
