"""Online VFL's requests and replies (their ``parts`` are encoded fedstream messages, see
:mod:`fedstream.deploy.records`; these are the typed ``info`` that goes with them).

* ``setup``: :class:`~fedstream.deploy.records.Setup`; the reply, :class:`SetupReply`, says which
  client and feature block the node holds and the round it is at (with one table file per party:
  the digest of its file's ids, which must be the server file's, in the same order, and the
  columns of ``data.categorical`` its file holds: together the clients' files must hold them all).
* ``round`` (:class:`RoundRequest`): rounds ``round .. round + events - 1`` have arrived (a batch
  of ``network.batch`` events, B). Its parts are first the gradients of the node's activated
  events of the previous batch (rounds ``grad_rounds``, in order: they ride along instead of
  costing messages of their own), then the server's Query of every event of the batch, in round
  order: the server queries every passive client (:func:`fedstream.ovfl.protocol.play_round`), so
  the node answers at once when an event leaves it passive, and the query of an activated event
  goes unused (it is not counted as payload). The reply (:class:`RoundReply`) holds one Embedding
  per event, in round order, and ``active``, which events activated the node: one round trip per
  batch. With a server-side activation policy (``topl``) the server decides: the request's
  ``active`` lists the B events' activations and its parts are only the gradients (the policy
  queries nobody); the reply echoes the list and holds one Embedding per activated event, nothing
  for the others (the server pads them). A batch then never crosses the end of a chunk, where the
  policy learns (:class:`fedstream.ovfl.deploy.driver.NetworkVFL`).
* ``finish`` (:class:`FinishRequest`): the last pending gradients; the reply
  (:class:`~fedstream.deploy.host.FinishReply`) reports the node's byte counts and a digest of its
  model (the model itself, in ``arrays``, only when ``models`` asks: VFL parties keep their models).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fedstream.deploy.records import Keep, Record
from fedstream.errors import ProtocolError

MAX_BATCH = 4096  # events per request a host accepts (network.batch's upper bound)


def _zeros_and_ones(active: list[int] | None, n: int, where: str, what: str) -> None:
    if active is not None and (len(active) != n or not set(active) <= {0, 1}):
        raise ProtocolError(f"{where}: {what} info 'active', a list of {n} zeros and ones, received "
                            f"{active!r}"[:300])


@dataclass(kw_only=True)
class RoundRequest(Keep):
    events: int
    grad_rounds: list[int] = field(default_factory=list)
    active: list[int] | None = None  # the server's activations (topl); None: the node decides

    def check(self, where: str, **context) -> None:
        super().check(where)
        if not 1 <= self.events <= MAX_BATCH:
            raise ProtocolError(f"{where}: a round request needs info 'events' between 1 and {MAX_BATCH}, "
                                f"received {self.events!r}")
        _zeros_and_ones(self.active, self.events, where, "the request needs")


@dataclass(kw_only=True)
class RoundReply(Record):
    active: list[int]

    def check(self, where: str, *, events: int = 0, **context) -> None:
        _zeros_and_ones(self.active, events, where, "expected")


@dataclass(kw_only=True)
class FinishRequest(Keep):
    grad_rounds: list[int] = field(default_factory=list)
    models: bool | None = None


@dataclass(kw_only=True)
class SetupReply(Record):
    client: int
    round: int
    n_features: int
    block_start: int
    block_stop: int
    ids: str | None = None  # a table with one file per party: the digest of the node's ids, in file order
    categorical: list[str] | None = None  # ... and the columns of data.categorical its file holds
