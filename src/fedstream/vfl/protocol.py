"""One round of event-driven online VFL, written once for every backend.

This function is the protocol: who sends what to whom, in which order (paper Algorithm 1 and its
synchronous form, Algorithm 3). It only talks to parties and to a transport, so the in-process
simulator and a network backend run the very same sequence of messages:

1. every client observes its feature block; each activated client sends its embedding (up);
2. the server queries each passive client (down), which answers with its embedding (up);
3. the server predicts, computes the loss and learns; it sends d loss / d embedding to each
   activated client (down), which back-propagates and learns.
"""

from __future__ import annotations

from time import perf_counter

import numpy as np

from fedstream.vfl.client import Client
from fedstream.vfl.server import RoundResult, Server


class ComputeClock:
    """Seconds spent inside client and inside server procedures (not in the transport)."""

    def __init__(self) -> None:
        self.client = 0.0
        self.server = 0.0


def play_round(
    t: int,
    x_blocks: list[np.ndarray],
    y: int,
    active: np.ndarray,
    server: Server,
    clients: list[Client],
    transport,
    clock: ComputeClock,
) -> RoundResult:
    """Run round ``t``: ``x_blocks[m]`` is client m's features, ``active[m]`` its activation."""
    embeddings = [None] * len(clients)
    active_ids = [m for m in range(len(clients)) if active[m]]
    tic = perf_counter()
    for client, x in zip(clients, x_blocks):
        client.observe(t, x)
    pushed = [clients[m].on_event(t) for m in active_ids]
    clock.client += perf_counter() - tic
    for msg in pushed:
        embeddings[msg.client] = transport.up(msg)
    for m in range(len(clients)):
        if embeddings[m] is None:
            query = transport.down(server.query(t, m))
            tic = perf_counter()
            msg = clients[m].on_query(query)
            clock.client += perf_counter() - tic
            embeddings[m] = transport.up(msg)
    tic = perf_counter()
    result = server.on_embeddings(t, y, embeddings, active_ids)
    clock.server += perf_counter() - tic
    for grad in result.gradients:
        grad = transport.down(grad)
        tic = perf_counter()
        clients[grad.client].on_gradient(grad)
        clock.client += perf_counter() - tic
    return result
