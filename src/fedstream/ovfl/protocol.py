"""One round of event-driven online VFL, written once for every backend.

This function is the protocol: who sends what to whom, in which order (paper Algorithm 1 and its
synchronous form, Algorithm 3). It only talks to parties and to a transport, so the in-process
simulator and a network backend run the very same sequence of messages:

1. every client observes its feature block; each activated client sends its embedding (up);
2. the server queries each passive client (down), which answers with its embedding (up) — unless
   ``queried`` says it does not: then nothing is sent and the server pads that client's embedding
   (``topl`` activation, :mod:`fedstream.selection.online`);
3. the server predicts, computes the loss and learns; it sends d loss / d embedding to each
   activated client (down), which back-propagates and learns.
"""

from __future__ import annotations

from time import perf_counter, thread_time

import numpy as np

from fedstream.ovfl.client import Client
from fedstream.ovfl.server import RoundResult, Server


class ComputeClock:
    """Seconds spent inside client and inside server procedures (not in the transport): wall-clock
    (``client``, ``server``: ``perf_counter``; the summary's ``*_compute_seconds``) and CPU time of
    this thread (``client_cpu``, ``server_cpu``: ``thread_time``; ``*_cpu_seconds``). Under load the
    wall-clock figures include the time the process waited for a core; the CPU figures do not."""

    def __init__(self) -> None:
        self.client = 0.0
        self.server = 0.0
        self.client_cpu = 0.0
        self.server_cpu = 0.0

    @staticmethod
    def start() -> tuple[float, float]:
        """Both clocks now: pass the result to :meth:`add_client` or :meth:`add_server`."""
        return perf_counter(), thread_time()

    def add_client(self, tic: tuple[float, float]) -> None:
        self.client += perf_counter() - tic[0]
        self.client_cpu += thread_time() - tic[1]

    def add_server(self, tic: tuple[float, float]) -> None:
        self.server += perf_counter() - tic[0]
        self.server_cpu += thread_time() - tic[1]


def play_round(
    t: int,
    x_blocks: list[np.ndarray],
    y: int,
    active: np.ndarray,
    server: Server,
    clients: list[Client],
    transport,
    clock: ComputeClock,
    queried: np.ndarray | None = None,
) -> RoundResult:
    """Run round ``t``: ``x_blocks[m]`` is client m's features, ``active[m]`` its activation;
    ``queried[m]`` whether the server queries it when passive (None: every passive client)."""
    embeddings = [None] * len(clients)
    active_ids = [m for m in range(len(clients)) if active[m]]
    tic = clock.start()
    for client, x in zip(clients, x_blocks):
        client.observe(t, x)
    pushed = [clients[m].on_event(t) for m in active_ids]
    clock.add_client(tic)
    for msg in pushed:
        embeddings[msg.client] = transport.up(msg)
    for m in range(len(clients)):
        if embeddings[m] is None and queried is not None and not queried[m]:
            embeddings[m] = server.pad(t, m)  # not asked: no message either way
        elif embeddings[m] is None:
            embeddings[m] = _ask(server.query(t, m), clients[m], transport, clock)
    return _learn(server, (t, y, embeddings, active_ids), clients, transport, clock)


def _ask(query, client, transport, clock: ComputeClock):
    """Step 2 for one passive client: the query goes down, its embedding comes back up."""
    query = transport.down(query)
    tic = clock.start()
    msg = client.on_query(query)
    clock.add_client(tic)
    return transport.up(msg)


def _learn(server, inputs: tuple, clients, transport, clock: ComputeClock):
    """Step 3: the server learns from ``inputs`` (its ``on_embeddings`` arguments) and each gradient
    goes down to its client, which learns."""
    tic = clock.start()
    result = server.on_embeddings(*inputs)
    clock.add_server(tic)
    for grad in result.gradients:
        grad = transport.down(grad)
        tic = clock.start()
        clients[grad.client].on_gradient(grad)
        clock.add_client(tic)
    return result


def play_stack_round(t: int, x_blocks: list[np.ndarray], y: int, split: list[tuple[np.ndarray, np.ndarray]],
                     server, clients, transport, clock: ComputeClock):
    """Round ``t`` of K runs that share the stream (:mod:`fedstream.ovfl.stack`): ``split[m]`` is
    (the runs in which client m is activated, those in which it is passive). The exchange of
    :func:`play_round`, each message carrying the runs it speaks for: per run, the same messages
    in the same order (tests compare them):

    1. each client observes its block; in the runs where it is activated it sends its embedding;
    2. the server queries it in the runs where it is passive, and it answers;
    3. the server predicts and learns in every run and sends the activated runs' gradients.
    """
    tic = clock.start()
    for client, x in zip(clients, x_blocks):
        client.observe(t, x)
    pushed = [client.on_event(t, on) for client, (on, _) in zip(clients, split) if on.size]
    clock.add_client(tic)
    embeddings: list[list] = [[] for _ in clients]
    for msg in pushed:
        embeddings[msg.client].append(transport.up(msg))
    for m, (client, (_, off)) in enumerate(zip(clients, split)):
        if off.size:
            embeddings[m].append(_ask(server.query(t, m, off), client, transport, clock))
    return _learn(server, (t, y, embeddings, [on for on, _ in split]), clients, transport, clock)
