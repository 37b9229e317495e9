"""Online VFL as a River classifier: ``fedstream.ovfl.OnlineVFL``, one sample at a time.

Not to be confused with :class:`fedstream.ovfl.engine.OnlineVFL`, the simulator behind
``fedstream run`` (a resolved config in, a whole stream played in chunks). This class takes keyword
settings, learns from flat feature dicts (``learn_one``) and plays each sample with the engine's own
parties (:class:`~fedstream.ovfl.client.Client`, :class:`~fedstream.ovfl.server.Server`), transport,
activation policy and :func:`~fedstream.ovfl.protocol.play_round`: the same models from the same
seed, the same activation draws (keyed by round, as the engine's), the same messages and bytes.
On the same rows and settings its :attr:`OnlineVFL.accumulated_error` is the engine's.

Who computes what: client m holds the features ``partition[m]`` and its bottom model; the server
holds the labels and the top model. ``learn_one`` is one protocol round; ``predict_proba_one`` is a
prediction (:mod:`fedstream.ovfl.inference`): each client embeds its own features, the server
predicts; nothing is learnt, and its bytes are counted apart (:attr:`OnlineVFL.inference_bytes`).

Requires River (``pip install fedstream[river]``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from river import base

import fedstream.ovfl.config as ovfl_config
from fedstream.config.schema import SHARED, common_fields
from fedstream.errors import ConfigError, DivergedError, NonFiniteError
from fedstream.fields import Field, FieldValueError, Shared
from fedstream.metrics import Prequential
from fedstream.ovfl.activation import activation_from_config
from fedstream.ovfl.engine import CHUNK
from fedstream.ovfl.inference import client_embedding, server_logits, softmax
from fedstream.ovfl.parties import build_parties
from fedstream.ovfl.protocol import ComputeClock, play_round
from fedstream.ovfl.stand_in import NodePadding
from fedstream.selection.padding import PADDINGS
from fedstream.transport import CompressionSpec, InProcessTransport, make_transport
from fedstream.transport.messages import Embedding

MODELS = {"shallow": "imnist", "deep": "higgs"}
"""``model``: the paper's image models (one-layer bottoms, a 256-unit top; the default: they learn
from a few hundred samples) or its HIGGS/SUSY models (4-layer bottoms, a 5-layer top; they need
thousands); the value is the dataset whose models the builders make."""

MISSING = ("absent", "zero", "error")
"""``missing``: what a feature of the partition missing from ``x`` means (see :class:`OnlineVFL`)."""

COMPRESSION = {"up": "none", "cache": False, "ratio": 0.125, "down": "none", "levels": 24,
               "outliers": "zero", "value_dtype": "float32", "feedback": False, "rounding": "nearest",
               "width": 3.0}
"""``compression``'s keys (``compression.*`` without the prefix) and their defaults, the config's."""


class OnlineVFL(base.Classifier):
    """Event-driven online vertical FL as a River classifier.

    ``partition`` maps each client (in order) to the names of its features; ``x`` in ``learn_one``
    and ``predict_one`` is a flat dict holding them all (other keys are ignored). Features are used
    as given, not standardised (the CLI's datasets are): put a ``preprocessing.StandardScaler`` in
    front, as below. ``classes``: the labels, in the order of the server's outputs; if left out,
    two classes are assumed, indexed in the order they first appear, and a third label is an error
    (the server's top model has one output per class, fixed when it is built).

    The other settings are the ``ovfl`` config keys: ``optimizer`` (``optimizer.name``: ogd, slr,
    dlr), ``lr``, ``server_lr``, ``window``, ``alpha``, ``activation`` (``activation.name``: full,
    random, event, fixed), ``p``, ``threshold``, ``k``, ``embedding``, ``seed``, ``model`` (see
    :data:`MODELS`) and ``compression``, a dict of ``compression.*`` keys without the prefix
    (``{"up": "topk"}``); bad values raise ValueError naming the keyword. ``topl`` activation
    learns from whole chunks of the stream and is left to ``fedstream run``. A NaN or infinite
    feature is an error.

    Features missing from ``x`` (``missing``; River streams may drop and add features):

    * ``"absent"`` (the default; the paper's event-driven model): a client none of whose features
      is in ``x`` did not observe the event. It is not activated and not queried, and sends
      nothing; the server stands in for its embedding with ``padding`` (``zero``, ``mean``,
      ``latest`` or ``ema`` of what the client sent before; :mod:`fedstream.selection.padding`),
      in learning and in prediction, as it does for a deployed client node that is down. The
      activation policy's draw is kept for the clients that observed it, so
      :attr:`activation_rate` counts only the events a client took part in. A client with some of
      its features in ``x`` takes part, its missing features 0.0 (after a StandardScaler, the
      feature's mean; River's linear models do the same). An ``x`` that no client observed is not
      an event: ``learn_one`` plays no round.
    * ``"zero"``: every missing feature is 0.0, and every client takes part.
    * ``"error"``: a missing feature is a ValueError naming it and its client.

    >>> from river import compose, evaluate, metrics, preprocessing
    >>> from fedstream.ovfl import OnlineVFL
    >>> import random
    >>> draw = random.Random(0).gauss
    >>> rows = []
    >>> for _ in range(500):
    ...     x = {"a": draw(0, 1), "b": draw(0, 1), "c": draw(0, 1), "d": draw(0, 1)}
    ...     rows.append((x, int(x["a"] + x["c"] > 0)))
    >>> vfl = OnlineVFL(partition={"bank": ["a", "b"], "shop": ["c", "d"]}, classes=[0, 1],
    ...                 optimizer="dlr", activation="random", seed=1)
    >>> model = compose.Pipeline(preprocessing.StandardScaler(), vfl)
    >>> evaluate.progressive_val_score(rows, model, metrics.Accuracy())
    Accuracy: 89.40%
    >>> model.predict_one({"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0})
    1
    >>> round(vfl.accumulated_error, 3)  # the learning rounds' own predictions: 1 - accuracy here
    0.106
    >>> vfl.rounds, vfl.bytes["total"] > 0, [round(r, 1) for r in vfl.activation_rate]
    (500, True, [0.5, 0.5])
    """

    def __init__(self, partition: dict, *, classes: list | None = None, optimizer: str = "dlr",
                 lr: float = 0.01, server_lr: float | None = None, window: int = 10, alpha: float = 0.95,
                 activation: str = "full", p: float = 0.5, threshold: float = 0.2, k: int = 2,
                 embedding: int = 64, model: str = "shallow", compression: dict | None = None, seed: int = 0,
                 missing: str = "absent", padding: str = "mean"):
        self.partition, self.classes, self.optimizer, self.lr = partition, classes, optimizer, lr
        self.server_lr, self.window, self.alpha, self.activation = server_lr, window, alpha, activation
        self.p, self.threshold, self.k, self.embedding = p, threshold, k, embedding
        self.model, self.compression, self.seed, self.missing = model, compression, seed, missing
        self.padding = padding
        if missing not in MISSING:
            raise ValueError(f"missing = {missing!r}: expected one of {', '.join(map(repr, MISSING))}")
        if padding not in PADDINGS:
            raise ValueError(f"padding = {padding!r}: expected one of {', '.join(map(repr, PADDINGS))}")
        self._features = _check_partition(partition)
        if model not in MODELS:
            raise ValueError(f"model = {model!r}: expected one of {', '.join(MODELS)}")
        if activation == "topl":
            raise ValueError("activation = 'topl' learns from whole chunks of a stream: use `fedstream run`")
        self.config = _config(self._settings(), self.compression or {})
        self.classes_: list = list(classes) if classes is not None else []
        if classes is not None and (len(set(self.classes_)) != len(self.classes_) or len(self.classes_) < 2):
            raise ValueError(f"classes = {classes!r}: expected at least two distinct labels")
        sizes = [len(f) for f in self._features]
        self.clients, self.server = build_parties(self.config, sizes, max(len(self.classes_), 2))
        self.transport = make_transport(len(sizes), CompressionSpec.from_config(self.config))
        self.policy = activation_from_config(self.config)
        self.inference = InProcessTransport(len(sizes))  # prediction messages, counted apart
        self.stand_in = NodePadding(padding, len(sizes), embedding)  # for a client that did not observe
        self.server.stand_in = self.stand_in
        self.metrics = Prequential(self.config["eval.interval"])
        self.clock = ComputeClock()
        self.active_counts = np.zeros(len(sizes), dtype=np.int64)
        self._mask: tuple[int, np.ndarray] | None = None  # (chunk, its activation draw)

    def _settings(self) -> dict:
        return {
            "data.name": MODELS[self.model], "vfl.clients": len(self._features),
            "optimizer.name": self.optimizer, "optimizer.lr": self.lr, "optimizer.server_lr": self.server_lr,
            "optimizer.window": self.window, "optimizer.alpha": self.alpha,
            "activation.name": self.activation, "activation.p": self.p,
            "activation.threshold": self.threshold,
            "activation.k": self.k if self.activation == "fixed" else min(self.k, len(self._features)),
            "model.embedding": self.embedding, "seed": self.seed,
        }

    @classmethod
    def _unit_test_params(cls):
        """River's estimator checks (``river.checks``) stream the Phishing data set through it."""
        yield {"partition": {"site": ["empty_server_form_handler", "popup_window", "https",
                                      "request_from_other_domain", "anchor_from_other_domain"],
                             "domain": ["is_popular", "long_url", "age_of_domain", "ip_in_url"]},
               "classes": [False, True]}

    # -- River's interface -------------------------------------------------------------------
    def learn_one(self, x: dict, y) -> None:
        """One protocol round on sample ``x`` with label ``y`` (the server's prediction before it
        learns is scored in :attr:`accumulated_error`)."""
        t = self.rounds
        blocks, present = self._blocks(x)
        label = self._label(y)
        if not present.any():  # no client observed it: not an event of this federation
            return
        active = self._active(t, blocks) & present
        try:
            result = play_round(t, blocks, label, active, self.server, self.clients, self.transport,
                                self.clock, queried=present)
        except NonFiniteError as exc:
            raise DivergedError(f"training diverged at round {t}: {exc} (lr = {self.lr}; try a smaller one)",
                                t) from exc
        self.metrics.update(label, result.prediction)
        self.active_counts += active

    def predict_proba_one(self, x: dict) -> dict:
        """The server's class probabilities for ``x`` ({} before any label is known)."""
        if not self.classes_:
            return {}
        proba = softmax(self._logits(x))[0, :len(self.classes_)]
        return dict(zip(self.classes_, (proba / proba.sum()).tolist()))

    def predict_one(self, x: dict):
        """The most probable class (the server's argmax, as in a learning round); None before any label."""
        if not self.classes_:
            return None
        return self.classes_[int(self._logits(x)[0, :len(self.classes_)].argmax())]

    # -- what a run reports ------------------------------------------------------------------
    @property
    def rounds(self) -> int:
        """Samples learnt so far."""
        return self.metrics.rounds

    @property
    def accumulated_error(self) -> float:
        """The prequential error of the learning rounds (the engine's ``accumulated_error``)."""
        return self.metrics.accumulated_error

    @property
    def bytes(self) -> dict:
        """The learning rounds' bytes, as in ``summary.json``: total, up, down, messages, per client."""
        return self.transport.ledger.summary()

    @property
    def inference_bytes(self) -> dict:
        """The bytes of the predictions (embeddings up; no gradient comes down)."""
        return self.inference.ledger.summary()

    @property
    def activation_rate(self) -> list[float]:
        """The fraction of rounds in which each client was activated."""
        return (self.active_counts / max(self.rounds, 1)).tolist()

    # -- helpers -----------------------------------------------------------------------------
    def _blocks(self, x: dict) -> tuple[list[np.ndarray], np.ndarray]:
        """Each client's features of ``x``, float32 as the engine's stream gives them (a missing one
        0.0, or an error), and whether each client observed ``x`` (``missing``, see the class)."""
        present = np.array([self.missing != "absent" or any(f in x for f in names)
                            for names in self._features])
        if self.missing == "error":
            for client, names in self.partition.items():
                lost = next((f for f in names if f not in x), None)
                if lost is not None:
                    raise ValueError(f"feature {lost!r} of client {client!r} is missing from x "
                                     f"(x has {sorted(map(str, x))})")
        blocks = [np.array([x.get(f, 0.0) for f in names], dtype=np.float32) for names in self._features]
        for names, block in zip(self._features, blocks):
            if not np.isfinite(block).all():
                bad = names[int(np.argmin(np.isfinite(block)))]
                raise ValueError(f"feature {bad!r} = {x.get(bad)!r}: expected a finite number")
        return blocks, present

    def _label(self, y) -> int:
        if y in self.classes_:
            return self.classes_.index(y)
        if self.classes is not None or len(self.classes_) == 2:
            raise ValueError(f"label {y!r} is not one of the classes {self.classes_}; pass every label "
                             "up front with classes=[...]")
        self.classes_.append(y)
        return len(self.classes_) - 1

    def _active(self, t: int, blocks: list[np.ndarray]) -> np.ndarray:
        """Round t's activation: row t % CHUNK of the chunk's draw, as the engine draws it."""
        chunk = t // CHUNK
        means = np.array([[b.mean() for b in blocks]], dtype=np.float32)
        if self.activation == "event":  # each row decides alone
            return self.policy.mask(chunk, means)[0]
        if self._mask is None or self._mask[0] != chunk:  # a draw over the whole chunk, keyed by it
            self._mask = (chunk, self.policy.mask(chunk, np.zeros((CHUNK, len(blocks)), np.float32)))
        return self._mask[1][t % CHUNK]

    def _logits(self, x: dict) -> np.ndarray:
        """The server's logits for ``x``: each client that observed it embeds its features and sends
        them up; the server pads the others (no message)."""
        blocks, present = self._blocks(x)
        t = self.rounds
        embeddings = [self.inference.up(client_embedding(c, t, b[None, :])) if seen else
                      Embedding(round=t, client=m, values=self.stand_in.fill(m, 1))
                      for m, (c, b, seen) in enumerate(zip(self.clients, blocks, present))]
        return server_logits(self.server, embeddings)


def _config(settings: dict, compression: dict) -> dict:
    """An ``ovfl`` config from keyword settings: the task's defaults, each given value checked
    against its field's rules (:meth:`fedstream.fields.Field.check`, as the config loader checks a
    config file; ValueError naming the keyword). Built here rather than by
    :func:`fedstream.config.load_config`, which gathers every task's keys and so imports this package."""
    config = {"task": "ovfl"} | {k: _field(k).default_for("ovfl") for k in ovfl_config.FIELDS}
    unknown = set(compression) - set(COMPRESSION)
    if unknown:
        raise ValueError(f"compression keys {sorted(unknown)}: expected some of {', '.join(COMPRESSION)}")
    given = settings | {f"compression.{k}": v for k, v in (COMPRESSION | compression).items()}
    for key, value in given.items():
        try:
            config[key] = _field(key).check(value, "ovfl")
        except FieldValueError as exc:
            raise ValueError(f"{_keyword(key)} = {value!r}: expected {exc.expected}") from None
    try:
        CompressionSpec.from_config(config)
        return ovfl_config.check(config)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def _field(key: str) -> Field:
    """The rules of an ``ovfl`` config key (a shared key's and a common key's, such as ``seed``, are
    declared in the config schema; a shared key's default may be the task's own)."""
    if key not in ovfl_config.FIELDS:
        return common_fields(("ovfl",), {"ovfl": ovfl_config.DATASETS})[key]
    entry = ovfl_config.FIELDS[key]
    if not isinstance(entry, Shared):
        return entry
    field = SHARED[key]
    if entry.default is Shared.INHERIT:
        return field
    return replace(field, task_defaults=(("ovfl", entry.default),))


def _keyword(key: str) -> str:
    """The keyword of :class:`OnlineVFL` that sets a config key (``optimizer.lr``: ``lr``,
    ``activation.name``: ``activation``; the ``compression`` dict's keys by their full name)."""
    if key.startswith("compression."):
        return key
    return key.split(".")[0 if key.endswith(".name") else -1]


def _check_partition(partition: dict) -> list[list[str]]:
    """Each client's feature names; ValueError for an empty client or a feature given twice."""
    if not isinstance(partition, dict) or not partition:
        raise ValueError(f"partition = {partition!r}: expected a dict mapping each client to its features")
    owner: dict = {}
    for client, names in partition.items():
        if isinstance(names, str) or not list(names):
            raise ValueError(f"partition[{client!r}] = {names!r}: expected a non-empty list of feature names")
        for name in names:
            if name in owner:
                raise ValueError(f"feature {name!r} is given to clients {owner[name]!r} and {client!r}")
            owner[name] = client
    return [list(names) for names in partition.values()]
