"""A streaming CHFL client party on its own node (``chfl.mode = "stream"``).

:class:`StreamHost` builds its :class:`~fedstream.chfl.client.Client` exactly as the simulator's
stream does (node k replays the run generator's draws of clients 0..k-1,
:func:`~fedstream.chfl.stream.draw_parties`) and answers one request per segment of ticks: θ (when
sent) loaded first, then each tick's batch predicted and learnt (:func:`~fedstream.chfl.stream.
learn_tick`), and at a synchronisation its common column sent up. What each request carries:
docs/deploy-protocol.md, "Streaming CHFL".
"""

from __future__ import annotations

import numpy as np

from fedstream.chfl.client import Client
from fedstream.chfl.deploy.data import StreamPart, stream_config_settings
from fedstream.chfl.deploy.host import ClientNode
from fedstream.chfl.deploy.records import SegmentReply, SegmentRequest, StreamSetupReply
from fedstream.chfl.stream import draw_parties, learn_tick, stream_client
from fedstream.deploy.host import FinishReply
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope
from fedstream.errors import ProtocolError
from fedstream.transport.tensors import encode_update


class StreamHost(ClientNode):
    """Client party ``index`` of a streaming CHFL run, holding only its own rows (``rows``)."""

    state_key = "chfl-stream"

    def __init__(self, config: dict, index: int, *, rows: StreamPart, state: dict | None = None):
        super().__init__(index, rows)
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
        msg = self.global_column(env.parts[0], f"{where}: ", self.client, None)
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

    def node_state(self) -> dict:
        return {"tick": self.tick, "since": self.since, "client": self.client.state()}

    def load_node_state(self, saved: dict) -> None:
        self.tick, self.since = int(saved["tick"]), int(saved["since"])
        self.client.load_state(saved["client"])
