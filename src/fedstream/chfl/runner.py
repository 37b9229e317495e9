"""A ``task = "chfl"`` config's run: its settings, then the batch trainer or the stream.

:data:`fedstream.chfl.task.TASK` calls :func:`train` through an entry point, so that the registry
does not import PyTorch; a deployed CHFL node builds its settings with :func:`chfl_settings`.
"""

from __future__ import annotations

from pathlib import Path

from fedstream.chfl.settings import CHFLSettings, named_by_config
from fedstream.chfl.stream import StreamSettings, run_stream
from fedstream.chfl.table_data import run_table
from fedstream.chfl.trainer import run_chfl
from fedstream.fields import number_list


def chfl_settings(config: dict) -> CHFLSettings:
    """The CHFL settings of a ``task = "chfl"`` config (batch mode)."""
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


def stream_settings(config: dict) -> StreamSettings:
    """The streaming-CHFL settings of a ``task = "chfl"``, ``chfl.mode = "stream"`` config."""
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


def train(config: dict, out: Path | None, progress, resume: bool) -> dict:
    with named_by_config():  # errors name chfl.* keys, not settings fields
        if config["chfl.mode"] == "stream":
            return run_stream(stream_settings(config), config["data.root"], method=config["chfl.method"],
                              seed=config["seed"], run_dir=out, resume=resume)
        if config["data.name"] == "table":
            return run_table(chfl_settings(config), config, method=config["chfl.method"], seed=config["seed"],
                             progress=progress, run_dir=out, resume=resume)
        return run_chfl(chfl_settings(config), config["data.root"], method=config["chfl.method"],
                        seed=config["seed"], progress=progress, run_dir=out, resume=resume)
