"""Batch VFL's requests and replies: the typed ``info`` beside the encoded messages of their
``parts`` (:mod:`fedstream.deploy.records`). A ``round`` request's ``split`` says which:
:class:`TrainRequest`, :class:`TestRequest` or :class:`SelectRequest` (VF-PS); ``finish`` is a
:class:`FinishRequest`, the setup reply a :class:`SetupReply`. The table of what each carries:
docs/deploy-protocol.md, "Batch VFL".
"""

from __future__ import annotations

from dataclasses import dataclass

from fedstream.deploy.records import Keep, Record, peek
from fedstream.errors import ProtocolError
from fedstream.transport.messages import Message
from fedstream.vfl.deploy.vfps import SELECT
from fedstream.vfl.settings import MAX_U16


@dataclass(kw_only=True)
class Request(Keep):
    """A ``round`` request; ``check`` needs the node's row count ``n`` of the split."""

    split: str
    rows: list[int] | None = None

    def check(self, where: str, *, n: int = 0, **context) -> None:
        super().check(where)
        if self.rows is not None and (not self.rows or any(not 0 <= r < n for r in self.rows)):
            what = "test" if self.split == "test" else "train"
            raise ProtocolError(f"{where}: info 'rows' must list {what} rows in 0..{n - 1}, received "
                                f"{str(self.rows)[:100]}")


@dataclass(kw_only=True)
class TrainRequest(Request):
    def check(self, where: str, **context) -> None:
        if self.rows is None:
            raise ProtocolError(f"{where}: info 'rows' must list the step's train rows")
        super().check(where, **context)
        if len(self.rows) > MAX_U16:
            raise ProtocolError(f"{where}: {len(self.rows)} rows, at most {MAX_U16} per batch")


@dataclass(kw_only=True)
class TestRequest(Request):
    sizes: list[int] | None = None
    steps: list[int] | None = None

    def check(self, where: str, *, step: int = 0, **context) -> None:
        if self.rows is None:
            raise ProtocolError(f"{where}: info 'rows' must list the test rows")
        super().check(where, **context)
        sizes, steps = self.sizes, self.steps
        if (not sizes or any(not 1 <= n <= MAX_U16 for n in sizes) or sum(sizes) != len(self.rows)
                or steps != list(range(step, step + len(sizes)))):
            raise ProtocolError(
                f"{where}: info 'sizes' must cut the {len(self.rows)} rows into batches of 1..{MAX_U16} and "
                f"'steps' number them from {step}, received sizes {str(sizes)[:100]}, "
                f"steps {str(steps)[:100]}"
            )


@dataclass(kw_only=True)
class SelectRequest(Request):
    queries: int | None = None

    def check(self, where: str, *, n: int = 0, **context) -> None:
        super().check(where, n=n)
        avail = n if self.rows is None else len(self.rows)
        if self.queries is None or not 1 <= self.queries <= avail:
            raise ProtocolError(f"{where}: info 'queries' must count 1..{avail} query samples, received "
                                f"{self.queries!r}"[:300])


EVALUATION = "evaluation"  # the request that ends an epoch (SELECT: the VF-PS selection that opens one)


def boundary_of(epoch: int, kind: str) -> int:
    """The node boundary kept at ``kind``'s request of ``epoch``: 2 epoch - 1 after the VF-PS selection
    (``SELECT``) that opens it, 2 epoch after the evaluation (``EVALUATION``) that ends it; the one
    formula for what a node keeps and what a resumed server asks it back for."""
    if kind not in (SELECT, EVALUATION):
        raise ValueError(f"boundary kind {kind!r}: expected {SELECT!r} or {EVALUATION!r}")
    first = 1 if kind == SELECT else 0  # epoch 0 ends before any training: boundary 0, the start
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < first:
        raise ValueError(f"epoch = {epoch!r}: expected an integer >= {first} for a {kind} boundary")
    return 2 * epoch - 1 if kind == SELECT else 2 * epoch


REQUESTS = {"train": TrainRequest, "test": TestRequest, SELECT: SelectRequest}


def read_request(info: dict, where: str, **context) -> Request:
    """The round request ``info`` holds (by its ``split``), checked."""
    split = info.get("split")
    if split not in REQUESTS:
        raise ProtocolError(
            f"{where}: info 'split' must be one of {tuple(REQUESTS)}, received {split!r}"[:300]
        )
    return REQUESTS[split].read(info, where, **context)


@dataclass(kw_only=True)
class FinishRequest(Keep):
    models: bool | None = None


@dataclass(kw_only=True)
class SetupReply(Record):
    client: int
    shape: list[int]
    n_train: int
    n_test: int
    step: int
    pending: int
    ids: str | None = None  # a table with one file per party: the digest of the node's ids, in file order
    categorical: list[str] | None = None  # ... and the columns of data.categorical its file holds

    def check(self, where: str, *, t: int = 0, **context) -> None:
        if not -1 <= self.step < t or self.pending not in (-1, self.step):
            raise ProtocolError(
                f"the node reports step {self.step!r} with the gradient of step {self.pending!r} due; "
                f"expected a step in -1..{t - 1} (the server plays step {t} next) and the due step -1 "
                "(none) or that step"
            )


def check_message(data: bytes, probe, kind: type, setting: str, shape: tuple[int, int], *, client: int,
                  step: int, what: str) -> Message:
    """One received part (the server's embeddings, the node's gradients) decoded by
    :func:`~fedstream.deploy.records.peek` and checked: a ``kind`` for ``client``, of ``step`` and
    ``shape`` (``what`` names it in the error); ProtocolError saying what is wrong."""
    try:
        msg = peek(data, probe, kind, setting, shape)
    except ProtocolError:  # header, codec, shape, length, finite: already says what is wrong
        raise
    except Exception as exc:  # noqa: BLE001 - untrusted bytes: any decoding failure is the sender's
        raise ProtocolError(f"undecodable {kind.__name__.lower()}: {exc}"[:500]) from None
    if msg.client != client:
        raise ProtocolError(
            f"a {type(msg).__name__} for client {msg.client} arrived on client {client}'s link"
        )
    values = getattr(msg, "values", None)
    got = None if values is None else tuple(values.shape)
    if type(msg) is not kind or msg.round != step or got != shape:
        raise ProtocolError(f"expected {what} of step {step} of shape {shape}, received a "
                            f"{type(msg).__name__} of step {msg.round}, shape {got}")
    return msg
