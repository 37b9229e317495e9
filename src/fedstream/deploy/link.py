"""What travels between the server's machine and a client node, whatever carries it.

An :class:`Envelope` is one request (server -> client node) or its reply. Its ``payload`` is a
fedstream message exactly as :func:`fedstream.transport.codec.encode` made it, or empty; these are
the bytes the ledgers count. ``info`` and ``arrays`` hold control data that is not part of the
algorithm's traffic (the config at setup, the final report). A *link* moves envelopes:
:class:`LoopbackLink` inside one process (tests, and the overhead-free baseline of a benchmark),
``fedstream.deploy.flower_app.GridLink`` over Flower.

Kinds of request:

* ``setup``: the run's config; the node builds its party.
* ``round``: round t has arrived. The payload is the gradient of the node's previous round when
  it was activated then (it rides along instead of costing a message of its own). The reply
  carries the node's embedding when the event activates it, nothing when it is passive.
* ``query``: the server's Query for a passive client; the reply carries the embedding.
* ``finish``: the last pending gradient; the reply reports the node's byte counts and a digest of
  its model (the model itself only when asked, for tests: VFL parties keep their models).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

SETUP, ROUND, QUERY, FINISH = "setup", "round", "query", "finish"
KINDS = (SETUP, ROUND, QUERY, FINISH)


@dataclass
class Envelope:
    """One request to a client node or its reply."""

    kind: str
    round: int
    payload: bytes = b""
    info: dict = field(default_factory=dict)  # str -> int | float | str | bool | bytes
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


class Link(Protocol):
    """Moves envelopes to client nodes (by client index) and returns their replies."""

    n_clients: int

    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope]:
        """Send every request at once; return each client's reply (all of them, or raise)."""
        ...


class LoopbackLink:
    """Client hosts in this process. With ``persist=True`` every request goes to a host rebuilt
    from the state the previous request left, as on a Flower SuperNode, where each message runs in
    a fresh ClientApp process."""

    def __init__(self, make_host: Callable[[int, dict | None], object], n_clients: int, *, persist: bool = True):
        self.n_clients, self.persist = n_clients, persist
        self._make_host = make_host
        self._state: dict[int, dict] = {}
        self._hosts: dict[int, object] = {}
        self.requests = 0

    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope]:
        replies = {}
        for m, env in requests.items():
            self.requests += 1
            host = self._hosts.get(m)
            if host is None or self.persist:
                host = self._make_host(m, self._state.get(m))
                self._hosts[m] = host
            replies[m] = host.handle(env)
            if self.persist:
                self._state[m] = host.state_dict()
        return replies
