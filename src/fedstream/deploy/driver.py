"""The server party of a deployed online VFL run: the simulator's loop over remote clients.

:class:`NetworkVFL` holds the labels and the top model, and plays
:func:`fedstream.vfl.protocol.play_round` round after round with :class:`RemoteClient` stand-ins
and a :class:`LinkTransport`; the clients live on their own nodes behind a link. One round costs
one request to every node (round t, carrying the previous gradient) plus one request per passive
client (its query); see :mod:`fedstream.deploy.proxy`.
"""

from __future__ import annotations

import json
import time

import numpy as np

from fedstream.data import Stream
from fedstream.deploy.link import FINISH, SETUP, Link
from fedstream.deploy.parties import build_server, check_deployable, server_labels
from fedstream.deploy.proxy import LinkTransport, RemoteClient
from fedstream.errors import ProtocolError
from fedstream.metrics import Prequential
from fedstream.vfl.engine import CHUNK, feature_blocks, online_summary
from fedstream.vfl.protocol import ComputeClock, play_round


class NetworkVFL:
    """The server's side of one run; ``link`` reaches client nodes 0..M-1."""

    def __init__(self, config: dict, link: Link, *, stream: Stream, record_sizes: bool = False):
        check_deployable(config)
        M = config["vfl.clients"]
        if link.n_clients != M:
            raise ProtocolError(f"the link reaches {link.n_clients} client nodes, vfl.clients = {M}")
        self.config, self.stream = config, stream
        source = stream.source
        self.blocks = feature_blocks(source.n_features, M)
        self.server = build_server(config, source.n_features, source.n_classes)
        self.transport = LinkTransport(link, record_sizes=record_sizes)
        self.clients = [RemoteClient(m, self.transport) for m in range(M)]
        self.metrics = Prequential(config["eval.interval"])
        self.clock = ComputeClock()
        self.active_counts = np.zeros(M, dtype=np.int64)
        self.wall_seconds = 0.0  # playing rounds (setup and finish not included)
        self.setup_seconds = 0.0
        self.t = 0
        self.reports: list[dict] = []
        self._labels: tuple[int, np.ndarray] | None = None

    def setup(self) -> None:
        """Send the config to every node; check that each holds the block the server expects."""
        replies = self.transport.flush(SETUP, 0, {"config": json.dumps(self.config)})
        for m, reply in replies.items():
            block = self.blocks[m]
            got = (reply.info.get("client"), reply.info.get("block_start"), reply.info.get("block_stop"))
            if got != (m, block.start, block.stop):
                raise ProtocolError(f"client node {m} reports client {got[0]} with features {got[1]}:{got[2]}, "
                                    f"expected client {m} with features {block.start}:{block.stop}")

    def label(self, t: int) -> int:
        chunk = t // CHUNK
        if self._labels is None or self._labels[0] != chunk:
            self._labels = (chunk, server_labels(self.stream, chunk * CHUNK, CHUNK))
        return int(self._labels[1][t % CHUNK])

    def run(self, rounds: int | None = None, *, on_round=None) -> dict:
        """Play rounds ``self.t .. rounds-1``, then send the nodes their last gradient; return the summary."""
        end = self.config["rounds"] if rounds is None else rounds
        if self.t == 0:
            tic = time.perf_counter()
            self.setup()
            self.setup_seconds = time.perf_counter() - tic
        tic = time.perf_counter()
        x_blocks = [None] * len(self.clients)  # each node reads its own block
        while self.t < end:
            t = self.t
            y = self.label(t)
            active = self.transport.begin_round(t)
            result = play_round(t, x_blocks, y, active, self.server, self.clients, self.transport, self.clock)
            self.metrics.update(y, result.prediction)
            self.active_counts += active
            if on_round is not None:
                on_round(t, y, result.prediction)
            self.t = t + 1
        self.wall_seconds += time.perf_counter() - tic
        return self.summary()

    def finish(self, *, models: bool = False) -> list[dict]:
        """Deliver the last gradients and collect each node's report (its model too if ``models``).

        Each node counts the bytes it received and sent; they must equal the server's counts.
        """
        replies = self.transport.flush(FINISH, self.t - 1, {"models": models})
        self.reports = []
        for m in range(len(self.clients)):
            info, ledger = replies[m].info, self.transport.ledger
            mine = (ledger.up[m], ledger.down[m], ledger.messages[m])
            theirs = (info.get("up"), info.get("down"), info.get("messages"))
            if mine != theirs:
                raise ProtocolError(f"client {m} counted (up, down, messages) = {theirs}, the server {mine}")
            report = dict(info)
            if models:
                report["params"] = [replies[m].arrays[f"param{i}"] for i in range(len(replies[m].arrays))]
            self.reports.append(report)
        return self.reports

    def summary(self) -> dict:
        return online_summary(self) | {
            "setup_seconds": self.setup_seconds,
            "exchanges": self.transport.exchanges,  # requests to the nodes, setup and finish included
            "clients": [{k: v for k, v in r.items() if k != "params"} for r in self.reports],
        }
