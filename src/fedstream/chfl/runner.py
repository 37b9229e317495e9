"""A ``task = "chfl"`` config's run: its settings, then the batch trainer or the stream.

:data:`fedstream.chfl.task.TASK` calls :func:`train` through an entry point, so that the registry
does not import PyTorch; a deployed CHFL node builds its settings with :func:`chfl_settings`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from fedstream.chfl.settings import CONFIG_KEYS, CHFLSettings, named_by_config
from fedstream.chfl.stream import StreamSettings, run_stream
from fedstream.chfl.table_data import run_stream_table, run_table
from fedstream.chfl.trainer import run_chfl
from fedstream.fields import number_list

# config strings that a settings field holds as a sequence
_LISTS = {
    "hidden": lambda v: number_list(v, int),
    "lrs": number_list,
    "mus": number_list,
    "shared_baselines": lambda v: tuple(b.strip() for b in v.split(",") if b.strip()),
}


def _settings(cls: type, config: dict):
    """``cls`` (a settings dataclass) from the config keys its fields stand for (:data:`CONFIG_KEYS`)."""
    values = {}
    for f in fields(cls):
        if f.name in CONFIG_KEYS:
            value = config[CONFIG_KEYS[f.name]]
            values[f.name] = _LISTS[f.name](value) if f.name in _LISTS else value
    return cls(**values)


def chfl_settings(config: dict) -> CHFLSettings:
    """The CHFL settings of a ``task = "chfl"`` config (batch mode)."""
    return _settings(CHFLSettings, config)


def stream_settings(config: dict) -> StreamSettings:
    """The streaming-CHFL settings of a ``task = "chfl"``, ``chfl.mode = "stream"`` config."""
    return _settings(StreamSettings, config)


def train(config: dict, out: Path | None, progress, resume: bool) -> dict:
    with named_by_config():  # errors name chfl.* keys, not settings fields
        if config["chfl.mode"] == "stream" and config["data.name"] == "table":
            return run_stream_table(stream_settings(config), config, method=config["chfl.method"],
                                    seed=config["seed"], run_dir=out, resume=resume)
        if config["chfl.mode"] == "stream":
            return run_stream(stream_settings(config), config["data.root"], method=config["chfl.method"],
                              seed=config["seed"], run_dir=out, resume=resume)
        if config["data.name"] == "table":
            return run_table(chfl_settings(config), config, method=config["chfl.method"], seed=config["seed"],
                             progress=progress, run_dir=out, resume=resume)
        return run_chfl(chfl_settings(config), config["data.root"], method=config["chfl.method"],
                        seed=config["seed"], progress=progress, run_dir=out, resume=resume)
