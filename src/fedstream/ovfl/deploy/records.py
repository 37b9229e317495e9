"""Online VFL's requests and replies: the typed ``info`` that goes with their parts (encoded
fedstream messages, :mod:`fedstream.deploy.records`). What each carries, in order:
docs/deploy-protocol.md, "Event batching"."""

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
    """Rounds ``round .. round + events - 1``: the parts are the gradients of rounds ``grad_rounds``,
    then each event's Query (none when ``active`` carries the server's activations)."""

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
    """One embedding per event (per activated one when the server decides) and which events
    activated the node."""

    active: list[int]

    def check(self, where: str, *, events: int = 0, **context) -> None:
        _zeros_and_ones(self.active, events, where, "expected")


@dataclass(kw_only=True)
class FinishRequest(Keep):
    """The last gradients (rounds ``grad_rounds``); ``models``: send the model back too."""

    grad_rounds: list[int] = field(default_factory=list)
    models: bool | None = None


@dataclass(kw_only=True)
class SetupReply(Record):
    """The client and feature block the node holds and the round it is at (one table file per
    party: the digest of its ids and its columns of ``data.categorical``)."""

    client: int
    round: int
    n_features: int
    block_start: int
    block_stop: int
    ids: str | None = None  # a table with one file per party: the digest of the node's ids, in file order
    categorical: list[str] | None = None  # ... and the columns of data.categorical its file holds
