"""A streaming CHFL client party on its own node (``chfl.mode = "stream"``).

The node builds its :class:`~fedstream.chfl.client.Client` exactly as the simulator's stream does
(:mod:`fedstream.chfl.stream`): from the data set's rows (the same ``max_rows`` subset) it computes
the run's layout (:func:`~fedstream.chfl.stream.stream_layout`: feature split, each client's part
of the row permutation, ticks, join ticks) and keeps only its own part, through the common
features and its own unique block, standardised on its first ``stats_rows`` rows. Its weights
come from the run's generator: the server's initial column is drawn first, then every client's
heads and column in order, so node k replays the draws of clients 0..k-1 and keeps its own
(:func:`~fedstream.chfl.stream.draw_parties`).

Requests (:mod:`fedstream.chfl.deploy.records`):

* ``setup``: its sizes and where it stands (``tick``: the last tick played, -1 fresh);
* ``round`` t (a segment, ticks [t, ``until``)): with a part, the global column θ (the server's
  broadcast when the node joins, after a synchronisation, or when it came back), loaded first;
  then each tick's batch is predicted (the prequential test) and learnt
  (:func:`~fedstream.chfl.stream.learn_tick`); the reply carries the correct counts per tick, the
  counts of its predictions and of the batch's labels per tick and class (``arrays``: ``predicted``,
  ``labels``; the server's collapse measure, :mod:`fedstream.metrics.collapse`) and, with
  ``upload``, the common column as an encoded ModelUpdate whose ``n_samples`` are the rows learnt
  since the previous upload;
* ``finish``: with a part, the last broadcast; the reply carries the node's byte counts.

A segment's ticks need nothing from the server between them (a client learns from its own rows
only until the next synchronisation), so one request covers them all: one round trip per FedAvg
round, not per tick, with the simulator's arithmetic. Every request is checked before anything
changes. The state (client, tick, rows since the last upload, byte counts) is one ``torch.save``
archive (:meth:`StreamHost.state_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedstream.chfl.client import Client, View
from fedstream.chfl.deploy.records import SegmentReply, SegmentRequest, StreamSetupReply, check_update
from fedstream.chfl.models import state_arrays
from fedstream.chfl.runner import stream_settings
from fedstream.chfl.settings import named_by_config
from fedstream.chfl.stream import (
    StreamLayout,
    StreamSettings,
    draw_parties,
    learn_tick,
    stream_client,
    stream_layout,
    stream_rows,
    stream_view,
)
from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.deploy.archive import pack_state, unpack_state
from fedstream.deploy.host import FinishReply, NodeHost
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope, check_client_index
from fedstream.errors import ConfigError, ProtocolError
from fedstream.transport.tensors import encode_update

STATE = "chfl-stream"


def stream_config_settings(config: dict) -> StreamSettings:
    """The run's streaming settings; a bad value is reported by its config key (``chfl.*``)."""
    with named_by_config():
        return stream_settings(config)


@dataclass
class StreamPart:
    """Client ``index``'s rows of a streaming run, and the run's layout (sizes and indices only)."""

    index: int
    view: View
    layout: StreamLayout
    n_rows: int
    n_features: int
    n_classes: int


def load_stream_part(config: dict, index: int, *, data_root: str | None = None) -> StreamPart:
    """Client ``index``'s part of ``config``'s data set (see the module doc)."""
    s = stream_config_settings(config)
    check_client_index(index, s.clients, "chfl.clients")
    table = load_chfl_dataset(s.dataset, resolve_data_root(data_root or config["data.root"])).table
    X, y = stream_rows(table.X, table.y, s, config["seed"])
    layout = stream_layout(len(y), X.shape[1], s, config["seed"])
    if layout.n_ticks < 1:
        raise ConfigError(f"chfl.stream_batch = {s.batch}: expected at most {len(y) // s.clients} (the rows "
                          "per client)")
    fs = layout.features
    view = stream_view(X, y, layout.parts[index], fs.common, fs.unique[index], s.stats_rows)
    return StreamPart(index, view, layout, len(y), int(X.shape[1]), SPECS[s.dataset].n_classes)


class StreamHost(NodeHost):
    """Client party ``index`` of a streaming CHFL run, holding only its own rows (``rows``)."""

    single_thread = True  # as the simulator runs: the same float sums in the same order

    def __init__(self, config: dict, index: int, *, rows: StreamPart, state: dict | None = None):
        if rows.index != index:
            raise ProtocolError(f"client {index}: its data part is client {rows.index}'s")
        super().__init__(index)
        self.part = rows
        self.settings = s = stream_config_settings(config)
        method, seed = config["chfl.method"], config["seed"]
        self.federated = method != "local"
        _, drawn = draw_parties(rows.layout, s, method, seed, rows.n_classes, index + 1)
        self.client: Client = stream_client(index, rows.view, drawn[index], s, method, seed)
        self.join = rows.layout.join_tick[index]
        self.tick = -1  # the last tick played
        self.since = 0  # rows learnt since the last upload
        if state:
            self.load_state_dict(state)

    def on_setup(self, env: Envelope) -> Envelope:
        p = self.part
        return Envelope(SETUP, env.round, info=StreamSetupReply(
            client=self.index, tick=self.tick, n_rows=p.n_rows, n_features=p.n_features,
            n_common=len(p.layout.features.common), n_classes=p.n_classes,
            n_ticks=p.layout.n_ticks, join_tick=self.join).info())

    def on_finish(self, env: Envelope) -> Envelope:
        self._global(env, f"client {self.index}, finish request")
        reply = FinishReply(up=self.up, down=self.down, messages=self.messages)
        return Envelope(FINISH, env.round, [], reply.info())

    def _global(self, env: Envelope, where: str) -> None:
        """Load the global column the request carries (if any), after checking it."""
        if len(env.parts) > (1 if self.federated else 0):
            raise ProtocolError(f"{where}: expected at most {int(self.federated)} model message(s), "
                                f"received {len(env.parts)}")
        if not env.parts:
            return
        msg = check_update(env.parts[0], f"{where}: ", client=self.index, round=None,
                           fits=state_arrays(self.client.common), column="its common column")
        self.received(env.parts[0])
        self.client.receive(msg)

    def on_round(self, env: Envelope) -> Envelope:
        a, where = env.round, f"client {self.index}, ticks from {env.round}"
        s, n_ticks = self.settings, self.part.layout.n_ticks
        request = SegmentRequest.read(env.info, where, t=a, n_ticks=n_ticks, federated=self.federated)
        if a < self.join or a <= self.tick:
            raise ProtocolError(f"{where}: the node joins at tick {self.join} and played up to tick "
                                f"{self.tick}: requests must move forward")
        self._global(env, where)  # the last check: from here on the request changes the node
        scores = [learn_tick(self.client, t, self.join, s.batch) for t in range(a, request.until)]
        self.since += len(scores) * s.batch
        self.tick = request.until - 1
        parts = []
        if request.upload:
            parts.append(self.sent(encode_update(self.client.upload()._replace(n_samples=self.since))))
            self.since = 0
        return Envelope(ROUND, a, parts, SegmentReply(correct=[int(c.correct) for c in scores]).info(),
                        arrays={"predicted": np.stack([c.predicted for c in scores]).astype(np.int64),
                                "labels": np.stack([c.labels for c in scores]).astype(np.int64)})

    def state_dict(self) -> dict[str, np.ndarray]:
        return pack_state(STATE, {"tick": self.tick, "since": self.since, "client": self.client.state(),
                                  "counters": self.counts()})

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        saved = unpack_state(STATE, state, f"client {self.index}")
        self.tick, self.since = int(saved["tick"]), int(saved["since"])
        self.load_counts(saved["counters"])
        self.client.load_state(saved["client"])
