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

import random
from time import perf_counter, thread_time

import numpy as np

from fedstream.ovfl.client import Client
from fedstream.ovfl.server import RoundResult, Server


class ComputeClock:
    """Seconds spent inside client and inside server procedures (not in the transport).

    ``client``, ``server``: wall-clock (``perf_counter``; the summary's ``*_compute_seconds``).
    :meth:`cpu`: the CPU time of this thread in them (``thread_time``; ``*_cpu_seconds``), which
    under load is the smaller, true cost. The CPU clock costs about 0.5 us a read (a system call;
    the wall clock 0.06 us): read around every section it slowed the engine by 9 %, so one section in
    eight, drawn at random, reads it too, and the CPU time is the wall time times the sampled
    sections' CPU / wall ratio (``samples``: their client wall, client CPU, server wall, server CPU).
    """

    SAMPLE = 0.125  # the fraction of sections that also read the CPU clock

    def __init__(self) -> None:
        self.client = 0.0
        self.server = 0.0
        self.samples = [0.0, 0.0, 0.0, 0.0]
        self._draw = random.Random(0).random

    def start(self) -> tuple[float, float | None]:
        """The clocks now (the CPU clock in one call of eight): pass it to :meth:`add_client` or
        :meth:`add_server` at the end of the section."""
        return perf_counter(), (thread_time() if self._draw() < self.SAMPLE else None)

    def add_client(self, tic: tuple[float, float | None]) -> None:
        wall = perf_counter() - tic[0]
        self.client += wall
        if tic[1] is not None:
            self.samples[0] += wall
            self.samples[1] += thread_time() - tic[1]

    def add_server(self, tic: tuple[float, float | None]) -> None:
        wall = perf_counter() - tic[0]
        self.server += wall
        if tic[1] is not None:
            self.samples[2] += wall
            self.samples[3] += thread_time() - tic[1]

    def add_segment(self, client: float, server: float, cpu_per_wall: float) -> None:
        """Seconds measured by the fused path (:mod:`fedstream.ovfl.fused`) for a segment of rounds:
        its client and server time, and the segment's CPU / wall ratio (all of it is sampled; a
        ratio above 1, which two clocks read one after the other can give, counts as 1)."""
        cpu_per_wall = min(max(cpu_per_wall, 0.0), 1.0)
        self.client += client
        self.server += server
        self.samples[0] += client
        self.samples[1] += client * cpu_per_wall
        self.samples[2] += server
        self.samples[3] += server * cpu_per_wall

    def cpu(self) -> tuple[float, float]:
        """(client, server) CPU seconds, estimated as described above. A thread's CPU time cannot
        exceed the wall time it was measured in, so the sampled ratio is capped at 1: the two
        clocks are read one after the other, and their reads alone can tip it over (1.0003 on an
        idle machine)."""
        cw, cc, sw, sc = self.samples
        return self.client * _ratio(cc, cw), self.server * _ratio(sc, sw)


def _ratio(cpu: float, wall: float) -> float:
    """CPU / wall in [0, 1] (0 where nothing was sampled)."""
    return min(cpu / wall, 1.0) if wall > 0 else 0.0


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
