"""The config keys fedstream reads: the shared ones here, each task's in its package.

Key names are a public contract (they appear in config files, ``--set`` and ``summary.json``).
Every key is validated before any work starts; see :func:`fedstream.config.load_config`.

Each task package declares its own keys (``fedstream/<task>/config.py``: ``FIELDS``, ``DATASETS``,
``check``) and hands them to its :class:`~fedstream.runs.task.Task` object (``fields``,
``datasets``, ``check``) in the task registry, :data:`fedstream.tasks.TASKS`. :func:`schema`
gathers them from there on first use, with the keys every task reads (``task``, ``seed``,
``data.*``) and those online and batch VFL share (``vfl.clients``, ``model.embedding``,
``optimizer.lr``, ``compression.*``), marking each key with the tasks that read it.

config/ lies below the task packages: they import it (:data:`SHARED`, :func:`shared`), it imports
none of them. The registry is named (:data:`REGISTRY`), as an entry point names a plugin, and read
when a config is first loaded; ``SCHEMA``, ``KEYS_BY_TASK``, ``TASKS``, ``DATASETS_BY_TASK``,
``DATASETS`` and ``COMMON`` are this module's attributes, computed then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from importlib import import_module
from typing import Any, Protocol

from fedstream.fields import Field, Shared

REGISTRY = "fedstream.tasks"
"""The module whose ``TASKS`` (name -> :class:`TaskKeys`, in the order of the tasks) supplies each
task's keys."""


class TaskKeys(Protocol):
    """What the schema reads of a task (a :class:`fedstream.runs.task.Task` provides it)."""

    name: str
    fields: Mapping[str, Field | Shared]
    datasets: tuple[str, ...]
    check: Callable[[dict], dict]


def common_fields(tasks: tuple[str, ...], datasets_by_task: dict[str, tuple[str, ...]]) -> dict[str, Field]:
    """The keys every task reads (``task`` and ``data.name`` take their choices from the tasks)."""
    datasets = tuple(dict.fromkeys(d for names in datasets_by_task.values() for d in names))
    return {
        "task": Field(
            str,
            tasks[0],
            "what to run: ovfl = event-driven online vertical FL, vfl = batch vertical FL "
            "(with compression), chfl = continual horizontal FL",
            choices=tasks,
        ),
        # torch.manual_seed takes at most 2**64 - 1 and the generators are seeded with seed + offsets:
        # 2**63 - 1 (also TOML's largest integer) leaves room; numpy's SeedSequence takes any of them
        "seed": Field(
            int, 0, "seed of models, data order, splits and activation draws", min=0, max=2**63 - 1
        ),
        "data.name": Field(
            str,
            datasets[0],
            "the dataset (which ones depends on the task)",
            choices=datasets,
            task_defaults=tuple((t, names[0]) for t, names in datasets_by_task.items())[1:],
        ),
        "data.root": Field(
            str, None, "data folder (else $FEDSTREAM_DATA, ./data, ../shared/data)", optional=True
        ),
        "track.uri": Field(
            str, None, "log the run to MLflow at this tracking URI (a folder or file: URI, sqlite:///x.db, "
            "http://host:5000); --track mlflow with none: MLflow's default store (./mlflow.db)",
            optional=True,
        ),
        "track.experiment": Field(str, "fedstream", "the MLflow experiment the run is logged under"),
    }


SHARED: dict[str, Field] = {
    "data.path": Field(
        str,
        None,
        'data.name = "table": the table file (CSV, CSV.gz, NPZ, Parquet), or one file per party '
        "separated by ';' (the server's first: id and label; then each client's: id and its columns)",
        optional=True,
    ),
    "data.label": Field(
        str, None, "table: the label column, by name or 0-based index (none: the first column "
        "that is not data.id)", optional=True
    ),
    "data.id": Field(
        str, None, "table: the row-id column (needed with several files: it aligns their rows)",
        optional=True,
    ),
    "data.categorical": Field(
        str, None, "table: columns one-hot encoded with the categories of the statistics rows "
        "(comma-separated names)", optional=True
    ),
    "vfl.partition": Field(
        str, None, "table: each client's columns, clients separated by ';', columns by ',' (names, "
        "0-based file indices or ranges such as 0-13); none: equal contiguous blocks", optional=True
    ),
    "vfl.clients": Field(
        int, 4, "number of clients M (equal contiguous feature blocks)", min=1
    ),
    "model.embedding": Field(
        int,
        64,
        "width of each client's embedding (vfl: none = the paper's, 128 or 16)",
        min=1,
        max=65535,
    ),
    "optimizer.lr": Field(
        float,
        0.01,
        "learning rate of the clients (and of the server unless server_lr); "
        "vfl: none = the paper's (0.01, CIFAR-10 0.001)",
        min=0.0,
        exclusive_min=True,
    ),
    "model.client": Field(
        str, None, 'your own client model: a factory "package.module:function" returning a torch.nn.Module '
        "(its arguments: docs, fedstream.own_models); none: the built-in one", optional=True,
    ),
    "model.server": Field(
        str, None, 'your own server (top) model: a factory "package.module:function" returning a '
        "torch.nn.Module; none: the built-in one", optional=True,
    ),
    "compression.up": Field(
        str,
        "none",
        "embedding codec: top-k by magnitude or ranked by the last gradient",
        choices=("none", "topk", "topk-grad"),
    ),
    "compression.cache": Field(
        bool, False, "the server fills unsent embedding entries from its cache"
    ),
    "compression.ratio": Field(
        float,
        0.125,
        "fraction k/n of each embedding row sent (paper: 0.125)",
        min=0.0,
        max=1.0,
        exclusive_min=True,
    ),
    "compression.down": Field(
        str,
        "none",
        "gradient codec: signSGD (+-1, or scaled by mean |g|) or 3-sigma quantisation + Huffman",
        choices=("none", "sign", "sign-scaled", "quant-huffman"),
    ),
    "compression.levels": Field(
        int, 24, "quantisation intervals P (paper: 24)", min=1, max=254
    ),
    "compression.outliers": Field(
        str,
        "zero",
        "quant-huffman: entries outside mu +- 3 sigma sent as 0 (the paper) or clipped to the ends",
        choices=("zero", "clip"),
    ),
    "compression.rounding": Field(
        str,
        "nearest",
        "quant-huffman: round to the nearest level (the paper) or stochastically (unbiased)",
        choices=("nearest", "stochastic"),
    ),
    "compression.width": Field(
        float, 3.0, "quant-huffman: the interval is mu +- width sigma (the paper: 3)", min=0.01, max=64
    ),
    "compression.value_dtype": Field(
        str,
        "float32",
        "type of the sent top-k values (float16: twice the ratio for the same bytes; int8 on a "
        "per-row scale: about four times)",
        choices=("float32", "float16", "int8"),
    ),
    "compression.feedback": Field(
        bool, False, "error feedback: the client re-adds what it did not send for a sample next time"
    ),
    "device": Field(
        str, "auto", "where the torch parties compute (vfl, chfl): auto (CUDA when present), cpu or cuda",
        choices=("auto", "cpu", "cuda"),
    ),
}
"""Keys of several tasks (online and batch VFL, CHFL), placed in each task's order by its ``Shared``
entries."""


def shared(prefix: str) -> dict[str, Shared]:
    """``Shared`` entries, in :data:`SHARED`'s order, for the shared keys starting with ``prefix``
    (a task's ``FIELDS`` reading them all, e.g. ``**shared("compression.")``)."""
    return {key: Shared() for key in SHARED if key.startswith(prefix)}


@dataclass(frozen=True)
class Schema:
    """Every key (``fields``; a field's ``tasks``: who reads it, None: every task), a task's keys in
    the order of its resolved configs (``keys_by_task``), its ``data.name`` values
    (``datasets_by_task``, the first is the default) and its multi-key checks (``checks``)."""

    fields: dict[str, Field]
    keys_by_task: dict[str, tuple[str, ...]]
    datasets_by_task: dict[str, tuple[str, ...]]
    checks: dict[str, Callable[[dict], dict]]


@cache
def schema() -> Schema:
    """The schema gathered from the task registry (:data:`REGISTRY`), on the first call; each
    task's keys in its order."""
    tasks: Mapping[str, TaskKeys] = import_module(REGISTRY).TASKS
    datasets_by_task = {name: tuple(task.datasets) for name, task in tasks.items()}
    common = common_fields(tuple(tasks), datasets_by_task)
    fields: dict[str, Field] = dict(common)
    order: dict[str, tuple[str, ...]] = {}
    for name, task in tasks.items():
        for key, entry in task.fields.items():
            if isinstance(entry, Shared):
                field = SHARED[key]
                default = field.default if entry.default is Shared.INHERIT else entry.default
            else:
                field, default = entry, entry.default
            known = fields.get(key)
            if known is None:
                fields[key] = replace(field, tasks=(name,), default=default)
            else:
                extra = () if default == known.default else ((name, default),)
                fields[key] = replace(known, tasks=(*known.tasks, name),
                                      task_defaults=known.task_defaults + extra)
        order[name] = (*common, *task.fields)
    return Schema(fields, order, datasets_by_task, {name: task.check for name, task in tasks.items()})


_LAZY: dict[str, Callable[[Schema], Any]] = {
    "SCHEMA": lambda s: s.fields,
    "KEYS_BY_TASK": lambda s: s.keys_by_task,
    "DATASETS_BY_TASK": lambda s: s.datasets_by_task,
    "TASKS": lambda s: tuple(s.datasets_by_task),
    "DATASETS": lambda s: s.fields["data.name"].choices,
    "COMMON": lambda s: {k: f for k, f in s.fields.items() if f.tasks is None},
}


def __getattr__(name: str) -> Any:
    """``SCHEMA`` (every key), ``KEYS_BY_TASK``, ``TASKS`` (the task names), ``DATASETS_BY_TASK``,
    ``DATASETS`` and ``COMMON`` (the keys every task reads): read from :func:`schema`."""
    if name in _LAZY:
        return _LAZY[name](schema())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
