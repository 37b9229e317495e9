"""The server's stand-ins for clients whose embedding did not come: a padding in its place.

:class:`NodePadding` stands in for a client that sent nothing (a deployed node that is down, a
River client that did not observe the round; ``network.padding``, :mod:`fedstream.selection.padding`);
:class:`PolicyStandIn` for the clients a server-side policy (``topl``) leaves out, with the node
padding for a node that is down. A :class:`fedstream.ovfl.server.Server` calls ``fill`` for the
embedding it pads and ``received`` after every round.
"""

from __future__ import annotations

import numpy as np

from fedstream.selection.padding import make_padding


class NodePadding:
    """The server's stand-in for a client node that is down (``network.padding``, see
    :mod:`fedstream.selection.padding`): its padding is the node's embedding while it is down."""

    def __init__(self, name: str, n_clients: int, embedding: int):
        self.padding = make_padding(name, n_clients, embedding)
        self.learns = name != "zero"

    def fill(self, client: int, rows: int) -> np.ndarray:
        return self.padding.fill(client, rows).astype(np.float32)

    def received(self, y: int, row: np.ndarray, real: np.ndarray) -> None:
        if self.learns:
            self.padding.update_rows(row.reshape(self.padding.n_clients, self.padding.dim), real)


class PolicyStandIn:
    """The server's stand-in when its policy pads the clients it leaves out (``topl``): a node that is
    down this round (``down``) gets the node padding (``network.padding``), any other client the
    policy's padding; both learn from every round's real embeddings, and the policy buffers the
    rounds where every client sent, as in the simulator."""

    def __init__(self, node: NodePadding, policy):
        self.node, self.policy = node, policy
        self.down = np.zeros(policy.n_clients, dtype=bool)

    def fill(self, client: int, rows: int) -> np.ndarray:
        return (self.node if self.down[client] else self.policy).fill(client, rows)

    def received(self, y: int, row: np.ndarray, real: np.ndarray) -> None:
        self.node.received(y, row, real)
        self.policy.received(y, row, real)
