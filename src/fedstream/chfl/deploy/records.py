"""CHFL's requests and replies: the typed ``info`` that goes with the encoded ModelUpdates of their
``parts`` (:mod:`fedstream.deploy.records`), batch mode's and the stream's, and the check of a
common column sent either way. What each request carries: docs/deploy-protocol.md, "CHFL"
(every task's finish reply is :class:`fedstream.deploy.host.FinishReply`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedstream.deploy.records import Keep, Record
from fedstream.errors import ProtocolError
from fedstream.transport.tensors import decode_update
from fedstream.transport.updates import ModelUpdate

SHARED_SIZES = ("n_rows", "n_classes", "n_features", "n_common", "n_test")  # every node must report the same
SIZES = (*SHARED_SIZES, "n_unique", "n_train", "n_val")


def check_update(data: bytes, where: str, *, client: int, round: int | None,
                 fits: Mapping[str, np.ndarray], column: str) -> ModelUpdate:
    """Decode a common column sent either way (header, length, finite values: :func:`~fedstream.
    transport.tensors.decode_update`) and check that it is ``client``'s, for ``round`` (None: any),
    with the tensor names and shapes of ``fits`` (``column`` names them in the error)."""
    msg = decode_update(data)
    if msg.client != client or (round is not None and msg.round != round):
        want = f"client {client}'s model" + ("" if round is None else f" for round {round}")
        raise ProtocolError(f"{where}expected {want}, received client {msg.client}'s for round {msg.round}")
    want_shapes = [(k, v.shape) for k, v in fits.items()]
    got_shapes = [(k, v.shape) for k, v in msg.tensors.items()]
    if got_shapes != want_shapes:
        raise ProtocolError(
            f"{where}the model's tensors {got_shapes} do not fit {column} {want_shapes}"[:500]
        )
    return msg


@dataclass(kw_only=True)
class RoundRequest(Keep):
    """Round ``t`` of federation ``lr_index``; ``validate``: score the round; ``epochs``: train."""

    lr_index: int
    validate: bool
    epochs: int

    def check(self, where: str, *, t: int = 0, lrs: int = 1, rounds: int = 0, local_epochs: int = 0,
              **context) -> None:
        super().check(where)
        if not 0 <= self.lr_index < lrs:
            raise ProtocolError(f"{where}: info 'lr_index' must be 0..{lrs - 1}, received {self.lr_index!r}")
        if self.validate and t == 0:
            raise ProtocolError(f"{where}: info 'validate' must be true or false (false in round 0), "
                                f"received {self.validate!r}")
        if self.epochs not in (0, local_epochs) or (self.epochs and t == rounds):
            raise ProtocolError(f"{where}: info 'epochs' must be 0 or chfl.local_epochs = {local_epochs} "
                                f"(0 in the last round), received {self.epochs!r}")


@dataclass(kw_only=True)
class SetupReply(Record):
    """The node's sizes (no data), the feature split's column indices and where it stands
    (federation ``lr_index``, ``round``; -1, -1: a fresh party)."""

    client: int
    lr_index: int
    round: int
    n_rows: int
    n_classes: int
    n_features: int
    n_common: int
    n_test: int
    n_unique: int
    n_train: int
    n_val: int
    common: list[int]
    unique: list[int]

    def check(self, where: str, **context) -> None:
        if min(self.lr_index, self.round) < -1:
            raise ProtocolError(f"{where}: 'lr_index' and 'round' must be integers >= -1, received "
                                f"{(self.lr_index, self.round)!r}")
        sizes = {k: getattr(self, k) for k in SIZES}
        for key, v in sizes.items():
            if v < 0:
                raise ProtocolError(f"{where}: {key!r} must be an integer >= 0, received {v!r}")
        if min(self.n_train, self.n_val, self.n_test, self.n_common, self.n_unique) == 0:
            raise ProtocolError(f"{where}: the node holds no rows or no features of a kind: {sizes}")
        for key, n in (("common", self.n_common), ("unique", self.n_unique)):
            v = getattr(self, key)
            if len(v) != n or any(not 0 <= i < self.n_features for i in v):
                raise ProtocolError(f"{where}: {key!r} must list {n} column indices, received {v!r}"[:300])


@dataclass(kw_only=True)
class RoundReply(Record):
    n_train: int | None = None
    val: float | None = None  # the best validation accuracy, when asked to validate

    def check(self, where: str, *, validate: bool = False, **context) -> None:
        if validate and (self.val is None or not 0.0 <= self.val <= 1.0):
            raise ProtocolError(
                f"expected info 'val': a validation accuracy in [0, 1], received {self.val!r}"[:300]
            )


# -- streaming CHFL (chfl.mode = "stream"): one request per segment of ticks ----------------------
@dataclass(kw_only=True)
class StreamSetupReply(Record):
    """A streaming node's sizes (no data) and where it stands (``tick``: the last tick it played,
    -1 for a fresh party)."""

    client: int
    tick: int
    n_rows: int
    n_features: int
    n_common: int
    n_classes: int
    n_ticks: int
    join_tick: int

    def check(self, where: str, **context) -> None:
        if self.tick < -1 or min(self.n_rows, self.n_features, self.n_common, self.n_classes,
                                 self.n_ticks) < 1 or not 0 <= self.join_tick < self.n_ticks:
            raise ProtocolError(f"{where}: sizes must be >= 1, 'tick' >= -1 and 'join_tick' in "
                                f"0..n_ticks - 1, received {self.info()}"[:300])


@dataclass(kw_only=True)
class SegmentRequest(Keep):
    """Ticks [round, ``until``) of the stream; ``upload``: send the common column after the last one
    (a FedAvg synchronisation ends the segment)."""

    until: int
    upload: bool

    def check(self, where: str, *, t: int = 0, n_ticks: int = 0, federated: bool = True, **context) -> None:
        super().check(where)
        if not 0 <= t < self.until <= n_ticks:
            raise ProtocolError(f"{where}: ticks [{t}, {self.until}) are not within the stream's "
                                f"0..{n_ticks}")
        if self.upload and not federated:
            raise ProtocolError(f"{where}: info 'upload' in a run without a common column (chfl.method = "
                                "'local')")


@dataclass(kw_only=True)
class SegmentReply(Record):
    """The node's correct predictions for each tick of the segment (its prequential test)."""

    correct: list[int]

    def check(self, where: str, *, ticks: int = 0, batch: int = 0, **context) -> None:
        if len(self.correct) != ticks or any(not 0 <= c <= batch for c in self.correct):
            raise ProtocolError(f"{where}: info 'correct' must be {ticks} counts in 0..{batch}, received "
                                f"{self.correct!r}"[:300])
