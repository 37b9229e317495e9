"""The config keys of task ``vfl`` (batch vertical FL with compression and participant
selection) and their checks.

Keys shared with online VFL (``vfl.clients``, ``model.embedding``, ``optimizer.lr``,
``compression.*``) are declared once in :mod:`fedstream.config.schema`; here they are
:class:`~fedstream.fields.Shared` entries (with this task's default where it differs).
"""

from __future__ import annotations

from typing import Any

from fedstream.config.schema import shared
from fedstream.fields import Field, Shared
from fedstream.own_models import check_keys
from fedstream.vfl.selection import SelectionSpec

NAME = "vfl"
DATASETS = ("mnist", "fashion-mnist", "cifar10", "table")  # the first is the default

FIELDS: dict[str, Field | Shared] = {
    "vfl.clients": Shared(),
    "model.embedding": Shared(default=None),
    "model.client": Shared(),
    "model.server": Shared(),
    "optimizer.lr": Shared(default=None),
    "train.epochs": Field(int, 10, "passes over the training set", min=1),
    "train.batch_size": Field(int, 100, "samples per mini-batch (paper: 100)", min=1, max=65535),
    "train.optimizer": Field(
        str, "sgd", "every party's optimiser: sgd (plain SGD, the paper's) or adam", choices=("sgd", "adam")
    ),
    "device": Shared(),
    "model.hidden": Field(
        int, 256, "hidden width of the MNIST-like client MLPs (and of the server's)", min=1
    ),
    "model.server_hidden": Field(
        int,
        None,
        "hidden width of the MNIST-like server MLP (none: model.hidden)",
        min=1,
        optional=True,
    ),
    "vfl.split": Field(
        str,
        "rows",
        "each client's strip of every image: consecutive pixel rows or columns",
        choices=("rows", "columns"),
    ),
    "model.resnet_width": Field(
        int, 64, "base channels of the CIFAR-10 clients' ResNet-18", min=1
    ),
    "data.train_rows": Field(
        int, None, "use only the first rows of the training set", min=1, optional=True
    ),
    "data.test_rows": Field(
        int, None, "use only the first rows of the test set", min=1, optional=True
    ),
    "data.path": Shared(),
    "data.label": Shared(),
    "data.id": Shared(),
    "data.categorical": Shared(),
    "vfl.partition": Shared(),
    "data.test_fraction": Field(
        float, 0.2, "table: the last rows of data.path held out as the test set (unless data.test_path)",
        min=0.0, max=1.0, exclusive_min=True, exclusive_max=True,
    ),
    "data.test_path": Field(
        str, None, "table: the test set in its own file(s), with the columns of data.path", optional=True
    ),
    **shared("compression."),
    "selection.method": Field(
        str,
        "all",
        "which clients send: all, vfps (KNN-MI group testing, top l), random "
        "(random picking), fixed (selection.clients)",
        choices=("all", "vfps", "random", "fixed"),
    ),
    "selection.l": Field(int, 3, "clients kept by vfps and random (paper: 3 of 4)", min=1),
    "selection.clients": Field(
        str,
        None,
        'fixed: the selected clients, comma-separated (e.g. "0,2"); a grid over subsets is the brute force',
        optional=True,
    ),
    "selection.k": Field(int, 10, "vfps: neighbours K of the KNN MI estimate", min=1),
    "selection.groups": Field(
        int, 10, "vfps with aggregate mean or sum: random groups of group testing (plus the full set); "
        "not used by marginal", min=1
    ),
    "selection.aggregate": Field(
        str,
        "marginal",
        "vfps: a client's score from group MI: marginal (each client alone, each leave-one-out group and "
        "the full set; the mean of its marginal contributions alone and to all the others), mean (of its "
        "random groups, the Dynamic VF-PS report's wording) or sum (of its random groups, the VF-PS "
        "reference code)",
        choices=("marginal", "mean", "sum"),
    ),
    "selection.queries": Field(
        int,
        None,
        "vfps: query samples drawn for eq. (1) (none: every available row)",
        min=1,
        optional=True,
    ),
    "selection.padding": Field(
        str,
        "zero",
        "what the server uses for unselected clients' embeddings",
        choices=("zero", "mean", "latest", "ema"),
    ),
    "selection.ema_alpha": Field(
        float, 0.1, "ema padding: weight of the newest row", min=0.0, max=1.0, exclusive_min=True
    ),
    "selection.dynamic": Field(
        str,
        "none",
        "available training data: none (all rows), discrete (redrawn subsets), "
        "relaxed (lifespans and arrivals)",
        choices=("none", "discrete", "relaxed"),
    ),
    "selection.update_prob": Field(
        float,
        0.2,
        "discrete: probability per epoch that the subset is redrawn (paper: 0.2)",
        min=0.0,
        max=1.0,
    ),
    "selection.keep": Field(
        float,
        0.5,
        "discrete / relaxed: share of the rows in a drawn subset",
        min=0.0,
        max=1.0,
        exclusive_min=True,
    ),
    "selection.arrival": Field(
        float, 0.05, "relaxed: probability per epoch that an absent row arrives", min=0.0, max=1.0
    ),
    "selection.lifespan_min": Field(
        int, 1, "relaxed: shortest lifespan of a row, in epochs", min=1
    ),
    "selection.lifespan_max": Field(
        int, 50, "relaxed: longest lifespan of a row, in epochs", min=1
    ),
    "selection.every": Field(
        int, 0, "also re-select every this many epochs (0: only when the data change)", min=0
    ),
}


def check(cfg: dict[str, Any]) -> dict[str, Any]:
    """The selection.* keys against each other and against vfl.clients (errors name the key)."""
    SelectionSpec.from_config(cfg).check_clients(cfg["vfl.clients"])
    check_keys(cfg)
    return cfg
