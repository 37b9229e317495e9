"""The in-process runtime: client nodes in this process, for tests and as the overhead-free baseline
of a benchmark. Like every runtime it only moves envelopes; each node is a
:class:`fedstream.deploy.session.Node`."""

from __future__ import annotations

from collections.abc import Callable

from fedstream.deploy.records import PSI, Envelope, Failure
from fedstream.deploy.session import Node, NodeMemory
from fedstream.errors import FedstreamError


class LoopbackLink:
    """Client nodes 0..``n_clients``-1 in this process; node m's data is ``rows(config, m)``.

    With ``persist=True`` (as on a Flower SuperNode, where each message runs in a fresh ClientApp
    process) each node's party is rebuilt for every request from what the previous one left
    (``memory``); with ``persist=False`` it stays in memory. With ``store`` (a folder) the nodes
    keep their checkpoints there. A node that raises gives a :class:`Failure`, as a ClientApp's
    error reply does on Flower."""

    def __init__(self, rows: Callable, n_clients: int, *, persist: bool = True, store=None):
        self.n_clients, self.persist, self.store = n_clients, persist, store
        self.memory: dict[int, NodeMemory] = {}  # what each node keeps between requests (persist=True)
        self.nodes = {m: Node(m, data=lambda adapter, config, m: rows(config, m), store=store)
                      for m in range(n_clients)}
        self.requests = 0

    def available(self) -> set[int]:
        return set(range(self.n_clients))

    def rejoined(self) -> set[int]:
        return set()

    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope | Failure]:
        replies: dict[int, Envelope | Failure] = {}
        for m, env in requests.items():
            self.requests += 1
            node, rebuilt = self.nodes[m], self.persist and env.kind != PSI
            try:
                if rebuilt:
                    node.restore(self.memory.get(m))
                replies[m] = node.handle(env)
                if rebuilt:
                    self.memory[m] = node.memory()
            except (FedstreamError, ValueError) as exc:  # the ClientApp's error reply
                replies[m] = Failure(f"the client failed: {exc}")
        return replies
