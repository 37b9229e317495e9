"""The config keys of task ``chfl`` (continual horizontal FL, batch and stream mode) and their
checks."""

from __future__ import annotations

from typing import Any

from fedstream.errors import ConfigError
from fedstream.fields import Field, Shared, number_list
from fedstream.own_models import check_keys

NAME = "chfl"
DATASETS = ("covertype", "covertype-uci", "sensorless", "jannis", "helena", "aloi", "table")  # first: default

FIELDS: dict[str, Field | Shared] = {
    "data.path": Shared(),
    "data.label": Shared(),
    "data.id": Shared(),
    "data.categorical": Shared(),
    "device": Shared(),
    "model.client": Shared(),
    "model.server": Shared(),
    "chfl.method": Field(
        str,
        "chfl",
        "chfl, or a baseline: common (FedAvg on common features), local, concat (section V-B5), fedprox",
        choices=("chfl", "common", "local", "concat", "fedprox"),
    ),
    "chfl.mode": Field(
        str,
        "batch",
        "batch: the paper's rounds of local epochs; stream: samples arrive online",
        choices=("batch", "stream"),
    ),
    "chfl.clients": Field(int, 5, "number of clients K", min=1),
    "chfl.common_ratio": Field(
        float,
        0.3,
        "fraction r of the features every client has",
        min=0.0,
        max=1.0,
        exclusive_min=True,
        exclusive_max=True,
    ),
    "chfl.split": Field(
        str,
        "random",
        "how common features are drawn (Table IV: by correlation with the rest)",
        choices=("random", "max-corr", "median-corr", "min-corr"),
    ),
    "chfl.split_index": Field(int, 0, "which random feature split (seeds the split)", min=0),
    "chfl.rounds": Field(int, 3, "FedAvg rounds T (not given by the paper)", min=1),
    "chfl.local_epochs": Field(int, 5, "local epochs per round (paper: 5)", min=1),
    "chfl.batch_size": Field(int, 64, "mini-batch size (paper: 64)", min=1),
    "chfl.hidden": Field(str, "512,256,128", "hidden widths of each column, comma-separated"),
    "chfl.lrs": Field(
        str, "0.003,0.001", "Adam learning rates each client chooses from on validation"
    ),
    "chfl.mus": Field(str, "0,0.5,1", "lateral-connection scales mu each client chooses from"),
    "chfl.prox_mu": Field(float, 0.01, "FedProx proximal weight", min=0.0, exclusive_min=True),
    "chfl.max_rows": Field(
        int, None, "use only this many rows of the dataset", min=1, optional=True
    ),
    "chfl.baselines": Field(
        str,
        "common",
        "baselines a chfl run also scores in its own federation (they share its "
        "common column): comma-separated common, concat; empty: none",
    ),
    "chfl.stream_batch": Field(int, 16, "stream mode: samples per tick per active client", min=1),
    "chfl.stream_sync_every": Field(int, 10, "stream mode: ticks between FedAvg rounds", min=1),
    "chfl.stream_lr": Field(
        float, 0.001, "stream mode: Adam learning rate", min=0.0, exclusive_min=True
    ),
    "chfl.stream_mu": Field(
        float, 0.5, "stream mode: lateral-connection scale", min=0.0, max=1.0
    ),
    "chfl.stream_late_join": Field(
        float,
        0.5,
        "stream mode: fraction of the stream after which the last client joins",
        min=0.0,
        max=1.0,
        exclusive_max=True,
    ),
    "chfl.stream_eval_every": Field(
        int, 20, "stream mode: ticks per point of the accuracy curve", min=1
    ),
}


def check(cfg: dict[str, Any]) -> dict[str, Any]:
    """The keys of a ``chfl`` config: number lists, and the split of the stream form."""
    _check_number_list(cfg, "chfl.hidden", int, 1, None)
    _check_number_list(cfg, "chfl.lrs", float, 0.0, None)
    _check_number_list(cfg, "chfl.mus", float, -1e-12, 1.0)
    _check_number_list(cfg, "chfl.lrs", float, 0.0, 1.0)  # Adam rates: the trainer's bound, checked up front
    if cfg["data.name"] == "table" and cfg["chfl.mode"] == "stream" and ";" in (cfg["data.path"] or ""):
        raise ConfigError('chfl.mode = "stream" on a table reads one file (the rows are dealt to the '
                          'clients); one file per client runs with chfl.mode = "batch"')
    if cfg["model.client"] or cfg["model.server"]:
        check_keys(cfg)
        mus = [cfg["chfl.stream_mu"]] if cfg["chfl.mode"] == "stream" else number_list(cfg["chfl.mus"])
        if cfg["chfl.method"] == "chfl" and any(mu != 0 for mu in mus):
            key = "chfl.stream_mu" if cfg["chfl.mode"] == "stream" else "chfl.mus"
            raise ConfigError(f"{key} = {cfg[key]}: with model.client / model.server (your own models) "
                              "CHFL's columns have no known hidden layers to connect laterally; set "
                              f"{key} = 0 (eq. 7's output sum z_c + z_u)")
    if cfg["chfl.mode"] == "stream" and cfg["chfl.split"] != "random":
        raise ConfigError(f"chfl.split = {cfg['chfl.split']!r} is for chfl.mode = batch; the stream form "
                          "draws random common features (chfl.split_index picks which)")
    return cfg


def _check_number_list(cfg: dict[str, Any], key: str, kind: type, above: float,
                       at_most: float | None) -> None:
    """A comma-separated list of numbers, each > ``above`` (and <= ``at_most``)."""
    try:
        values = [kind(v) for v in cfg[key].split(",")]
    except ValueError:
        values = []
    if not values or any(v <= above or (at_most is not None and v > at_most) for v in values):
        bound = f"in ({above:g}, {at_most:g}]" if at_most is not None else f"> {above:g}"
        raise ConfigError(f"{key} = {cfg[key]!r}: expected a comma-separated list of numbers {bound}")
