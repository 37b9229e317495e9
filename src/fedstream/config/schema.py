"""The config keys fedstream reads: the shared ones here, each task's in its package.

Key names are a public contract (they appear in config files, ``--set`` and ``summary.json``).
Every key is validated before any work starts; see :func:`fedstream.config.load_config`.

Each task package declares its own keys (``fedstream/<task>/config.py``: ``FIELDS``, ``DATASETS``,
``check``); :data:`SCHEMA` gathers them with the keys every task reads (``task``, ``seed``,
``data.*``) and those online and batch VFL share (``vfl.clients``, ``model.embedding``,
``optimizer.lr``, ``compression.*``), marking each key with the tasks that read it.
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType

from fedstream.chfl import config as chfl_config
from fedstream.fields import Field, Shared
from fedstream.ovfl import config as ovfl_config
from fedstream.vfl import config as vfl_config

TASK_CONFIGS: dict[str, ModuleType] = {m.NAME: m for m in (ovfl_config, vfl_config, chfl_config)}
TASKS = tuple(TASK_CONFIGS)
DATASETS_BY_TASK = {name: m.DATASETS for name, m in TASK_CONFIGS.items()}
DATASETS = tuple(dict.fromkeys(d for names in DATASETS_BY_TASK.values() for d in names))

COMMON: dict[str, Field] = {
    "task": Field(
        str,
        TASKS[0],
        "what to run: ovfl = event-driven online vertical FL, vfl = batch vertical FL "
        "(with compression), chfl = continual horizontal FL",
        choices=TASKS,
    ),
    # torch.manual_seed takes at most 2**64 - 1 and the generators are seeded with seed + offsets:
    # 2**63 - 1 (also TOML's largest integer) leaves room; numpy's SeedSequence takes any of them
    "seed": Field(int, 0, "seed of models, data order, splits and activation draws", min=0, max=2**63 - 1),
    "data.name": Field(
        str,
        DATASETS[0],
        "the dataset (which ones depends on the task)",
        choices=DATASETS,
        task_defaults=tuple((t, names[0]) for t, names in DATASETS_BY_TASK.items())[1:],
    ),
    "data.root": Field(
        str, None, "data folder (else $FEDSTREAM_DATA, ./data, ../shared/data)", optional=True
    ),
}
"""The keys every task reads."""

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
    "compression.value_dtype": Field(
        str,
        "float32",
        "type of the sent top-k values (float16: twice the ratio for the same bytes)",
        choices=("float32", "float16"),
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


def _gather() -> tuple[dict[str, Field], dict[str, tuple[str, ...]]]:
    """Every key with the tasks that read it and their defaults; each task's keys in its order."""
    schema: dict[str, Field] = dict(COMMON)
    order: dict[str, tuple[str, ...]] = {}
    for name, module in TASK_CONFIGS.items():
        for key, entry in module.FIELDS.items():
            if isinstance(entry, Shared):
                field = SHARED[key]
                default = field.default if entry.default is Shared.INHERIT else entry.default
            else:
                field, default = entry, entry.default
            known = schema.get(key)
            if known is None:
                schema[key] = replace(field, tasks=(name,), default=default)
            else:
                extra = () if default == known.default else ((name, default),)
                schema[key] = replace(known, tasks=(*known.tasks, name),
                                      task_defaults=known.task_defaults + extra)
        order[name] = (*COMMON, *module.FIELDS)
    return schema, order


SCHEMA, KEYS_BY_TASK = _gather()
"""``SCHEMA``: every key (``tasks``: who reads it, None: every task); ``KEYS_BY_TASK``: a task's
keys in the order of its resolved configs."""
