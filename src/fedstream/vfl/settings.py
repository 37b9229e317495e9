"""Settings of a batch VFL run, validated field by field (issue 7; the paper's section 4.1).

Each field maps to a dotted config key (:data:`CONFIG_KEYS`), and every error names that key and
the values it may take. ``lr`` and ``embedding`` default to the paper's choice for the dataset:
0.01 and 128 for MNIST and Fashion-MNIST, 0.001 and 16 for CIFAR-10 (:meth:`resolved`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace

from fedstream.errors import ConfigError
from fedstream.own_models import Spec, name_of
from fedstream.transport import CompressionSpec
from fedstream.vfl.selection import SelectionSpec

DATASETS = ("mnist", "fashion-mnist", "cifar10", "table")
SPLITS = ("rows", "columns")
OPTIMIZERS = ("sgd", "adam")  # the parties' (fedstream.vfl.parties.make_optimizer)
PAPER_LR = {"mnist": 0.01, "fashion-mnist": 0.01, "cifar10": 0.001, "table": 0.01}
PAPER_EMBEDDING = {"mnist": 128, "fashion-mnist": 128, "cifar10": 16, "table": 16}
TABLE_KEYS = ("data.path", "data.label", "data.id", "data.categorical", "vfl.partition", "data.test_fraction",
              "data.test_path")
"""The keys of ``data.name = "table"`` (:mod:`fedstream.vfl.table_data`), kept as given in ``table``."""
MAX_U16 = 65535  # rows and columns travel as u16 in the message header

CONFIG_KEYS = {
    "dataset": "data.name",
    "clients": "vfl.clients",
    "epochs": "train.epochs",
    "batch_size": "train.batch_size",
    "optimizer": "train.optimizer",
    "lr": "optimizer.lr",
    "embedding": "model.embedding",
    "hidden": "model.hidden",
    "server_hidden": "model.server_hidden",
    "resnet_width": "model.resnet_width",
    "train_rows": "data.train_rows",
    "test_rows": "data.test_rows",
    "split": "vfl.split",
    "device": "device",
    "client_model": "model.client",
    "server_model": "model.server",
}


@dataclass(frozen=True)
class BatchVFLSettings:
    """What a batch VFL run does; see :data:`CONFIG_KEYS` for the config key of each field.

    * ``dataset``: ``mnist``, ``fashion-mnist`` or ``cifar10``;
    * ``clients``: M, each holding one horizontal strip of every image (paper: 4);
    * ``epochs``, ``batch_size`` (paper: 100), ``optimizer`` (``sgd``: plain SGD, the paper's;
      ``adam``), ``lr`` (None = the paper's);
    * ``embedding``: client output width (None = the paper's); ``hidden``: width of the MLPs'
      hidden layer (MNIST-like; the server's too unless ``server_hidden``); ``resnet_width``: base
      channels of the clients' ResNet-18 (CIFAR-10);
    * ``train_rows`` / ``test_rows``: use only the first rows of each split (None = all);
    * ``split``: ``rows`` (client m holds a strip of pixel rows) or ``columns`` (a strip of columns);
    * ``compression``: the codec of each direction (:class:`fedstream.transport.CompressionSpec`);
    * ``selection``: participant selection, padding and dynamic data
      (:class:`fedstream.vfl.selection.SelectionSpec`);
    * ``client_model`` / ``server_model``: your own bottom / top model, a factory as a
      ``"module:function"`` path or a callable (:mod:`fedstream.own_models`; None: the paper's).
    """

    dataset: str = "mnist"
    clients: int = 4
    epochs: int = 10
    batch_size: int = 100
    optimizer: str = "sgd"
    lr: float | None = None
    embedding: int | None = None
    hidden: int = 256
    server_hidden: int | None = None
    resnet_width: int = 64
    train_rows: int | None = None
    test_rows: int | None = None
    split: str = "rows"
    device: str = "auto"  # auto | cpu | cuda (fedstream.runs.device)
    compression: CompressionSpec = field(default_factory=CompressionSpec)
    selection: SelectionSpec = field(default_factory=SelectionSpec)
    table: tuple[tuple[str, object], ...] = ()  # data.name = "table": (key, value) of TABLE_KEYS
    client_model: Spec | None = None  # model.client: a factory of the clients' bottom models
    server_model: Spec | None = None  # model.server: a factory of the server's top model

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ConfigError(f"data.name = {self.dataset!r}: expected one of {', '.join(DATASETS)}")
        _integer("clients", self.clients, 1, 32)
        _integer("epochs", self.epochs, 1)
        _integer("batch_size", self.batch_size, 1, MAX_U16)
        _integer("embedding", self.embedding, 1, MAX_U16, optional=True)
        _integer("hidden", self.hidden, 1)
        _integer("server_hidden", self.server_hidden, 1, optional=True)
        _integer("resnet_width", self.resnet_width, 1)
        _integer("train_rows", self.train_rows, 1, optional=True)
        _integer("test_rows", self.test_rows, 1, optional=True)
        if self.lr is not None and (
            isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not self.lr > 0
        ):
            raise ConfigError(
                f"optimizer.lr = {self.lr!r}: expected a number > 0 (paper: 0.01 MNIST, 0.001 CIFAR-10)"
            )
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(
                f"train.optimizer = {self.optimizer!r}: expected one of {', '.join(OPTIMIZERS)}"
            )
        if self.split not in SPLITS:
            raise ConfigError(f"vfl.split = {self.split!r}: expected one of {', '.join(SPLITS)}")
        if not isinstance(self.compression, CompressionSpec):
            raise ConfigError(
                f"compression: expected a CompressionSpec, got {type(self.compression).__name__}"
            )
        if not isinstance(self.selection, SelectionSpec):
            raise ConfigError(f"selection: expected a SelectionSpec, got {type(self.selection).__name__}")
        self.selection.check_clients(self.clients)
        for name in ("client_model", "server_model"):
            spec = getattr(self, name)
            if spec is not None and not (callable(spec) or (isinstance(spec, str) and spec.strip())):
                raise ConfigError(f"{CONFIG_KEYS[name]} = {spec!r}: expected a factory as "
                                  '"package.module:function" or a callable returning a torch.nn.Module')
        if self.dataset == "table" and not dict(self.table).get("data.path"):
            raise ConfigError('data.name = "table" needs data.path (the table file, or one file per party '
                              "separated by ';')")

    @property
    def own_draws(self) -> bool:
        """A table with one file per party: each party draws its initial model from its own seed
        (:func:`fedstream.vfl.models.build_models_alone`)."""
        return ";" in str(dict(self.table).get("data.path") or "").strip(" ;")

    def resolved(self) -> BatchVFLSettings:
        """These settings with ``lr`` and ``embedding`` set (the paper's values where None)."""
        return replace(self, lr=float(PAPER_LR[self.dataset] if self.lr is None else self.lr),
                       embedding=PAPER_EMBEDDING[self.dataset] if self.embedding is None else self.embedding)

    @classmethod
    def from_config(cls, config: Mapping) -> BatchVFLSettings:
        """Settings from a flat config (dotted keys); absent or None keys take the defaults."""
        values = {f: config[k] for f, k in CONFIG_KEYS.items() if config.get(k) is not None}
        table = tuple((k, config.get(k)) for k in TABLE_KEYS) if config.get("data.name") == "table" else ()
        return cls(**values, compression=CompressionSpec.from_config(config),
                   selection=SelectionSpec.from_config(config), table=table)

    def to_config(self) -> dict:
        """The flat config (dotted keys) of these settings, ``compression.*`` and ``selection.*`` included."""
        out = {CONFIG_KEYS[f.name]: getattr(self, f.name) for f in fields(self) if f.name in CONFIG_KEYS}
        for name in ("client_model", "server_model"):  # a callable as its "module:qualname"
            out[CONFIG_KEYS[name]] = None if getattr(self, name) is None else name_of(getattr(self, name))
        return out | self.compression.to_config() | self.selection.to_config() | dict(self.table)


def _integer(name: str, value, lo: int, hi: int | None = None, *, optional: bool = False) -> None:
    """ConfigError naming the field's config key unless ``value`` is an int in [lo, hi] (or None if
    optional)."""
    if value is None and optional:
        return
    ok = (
        isinstance(value, int) and not isinstance(value, bool) and value >= lo and (hi is None or value <= hi)
    )
    if not ok:
        span = f"an integer >= {lo}" if hi is None else f"an integer in {lo}..{hi}"
        raise ConfigError(f"{CONFIG_KEYS[name]} = {value!r}: expected {span}{' or none' if optional else ''}")
