"""The in-process runtime: client nodes in this process, for tests and as the overhead-free baseline
of a benchmark. Like every runtime it only moves envelopes; the nodes answer them with
:func:`fedstream.deploy.session.handle_on_node`."""

from __future__ import annotations

import json
from collections.abc import Callable

from fedstream.deploy.adapters import adapter_for
from fedstream.deploy.psi import PsiNode
from fedstream.deploy.records import PSI, SETUP, Envelope, Failure
from fedstream.deploy.session import handle_on_node
from fedstream.errors import FedstreamError


class LoopbackLink:
    """Client nodes in this process, for tests and as the Flower-free baseline of a benchmark.

    With ``persist=True`` (as on a Flower SuperNode, where each message runs in a fresh ClientApp
    process) every request goes through :func:`fedstream.deploy.session.handle_on_node`: the host is
    rebuilt from the state the previous request left, and with ``store`` (a folder) each node keeps
    its checkpoints there. With ``persist=False`` each node's host stays in memory. ``rows(config,
    m)`` gives node m its data (placed in the order the server's alignment said, with one file per
    party: :class:`~fedstream.deploy.psi.PsiNode`). A node that raises gives a :class:`Failure`, as
    a ClientApp's error reply does on Flower. The nodes host the party of the config's task (its adapter,
    :func:`fedstream.deploy.adapters.adapter_for`)."""

    def __init__(self, rows: Callable, n_clients: int, *, persist: bool = True, store=None):
        self.n_clients, self.persist, self.store = n_clients, persist, store
        self._rows = rows
        self.memory: dict[int, object] = {}  # what each node keeps between requests (persist=True)
        self._hosts: dict[int, object] = {}
        # one file per party: each node's side of the ids' alignment, before setup (as LiveNode's)
        self._psi = {m: PsiNode(m, store) for m in range(n_clients)}
        self.requests = 0

    def available(self) -> set[int]:
        return set(range(self.n_clients))

    def rejoined(self) -> set[int]:
        return set()

    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope | Failure]:
        replies: dict[int, Envelope | Failure] = {}
        for m, env in requests.items():
            self.requests += 1
            try:
                if env.kind == PSI:
                    replies[m] = self._psi[m].handle(env)
                    continue
                if self.persist:
                    replies[m], self.memory[m] = handle_on_node(env, m, self.memory.get(m), data=self._data,
                                                                 store=self.store)
                    continue
                if env.kind == SETUP:
                    config = json.loads(env.info["config"])
                    adapter = adapter_for(config["task"])
                    self._hosts[m] = adapter.host(config, m, data=self._data(adapter, config, m))
                replies[m] = self._hosts[m].handle(env)
            except (FedstreamError, ValueError) as exc:  # the ClientApp's error reply
                replies[m] = Failure(f"the client failed: {exc}")
        return replies

    def _data(self, adapter, config: dict, m: int):
        return self._psi[m].place(self._rows(config, m), config)
