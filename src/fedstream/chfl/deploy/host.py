"""CHFL's client parties on their nodes: one :class:`fedstream.chfl.client.Client` behind envelopes.

:class:`ClientNode` is what both share (the data part's check, θ checked against the common column,
the state archive with the byte counts); :class:`CHFLHost` plays batch rounds with the simulator's
code for one client (:mod:`fedstream.chfl.cohort`), :class:`StreamHost` segments of ticks with the
simulator's stream code (:mod:`fedstream.chfl.stream`). Every request is checked before anything
changes. What each request carries: docs/deploy-protocol.md, "CHFL".
"""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np

from fedstream.chfl.client import Client
from fedstream.chfl.cohort import (
    keep_common,
    load_records,
    records_state,
    score_choices,
    train_and_upload,
    validate_client,
)
from fedstream.chfl.deploy.data import NodePart, StreamPart, chfl_config_settings, stream_config_settings
from fedstream.chfl.deploy.records import (
    RoundReply,
    RoundRequest,
    SegmentReply,
    SegmentRequest,
    SetupReply,
    StreamSetupReply,
    check_update,
)
from fedstream.chfl.models import state_arrays
from fedstream.chfl.plan import Plan, build_clients
from fedstream.chfl.selection import Selector
from fedstream.chfl.stream import StreamParty, draw_parties, stream_client
from fedstream.chfl.trainer import variants_of
from fedstream.deploy.archive import pack_state, unpack_state
from fedstream.deploy.host import FinishReply, NodeHost
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope
from fedstream.errors import ProtocolError
from fedstream.transport.tensors import encode_update
from fedstream.transport.updates import ModelUpdate


class ClientNode(NodeHost):
    """Client party ``index`` of a CHFL run holding its part of the data (``rows``); a subclass keeps
    its state under ``state_key`` (:meth:`node_state`, :meth:`load_node_state`)."""

    single_thread = True  # as the simulator runs: the same float sums in the same order
    state_key = ""

    def __init__(self, index: int, rows):
        if rows.index != index:
            raise ProtocolError(f"client {index}: its data part is client {rows.index}'s")
        super().__init__(index)
        self.part = rows

    def global_column(self, data: bytes, where: str, client: Client, round: int | None) -> ModelUpdate:
        """Decode θ (header, length, finite values) and check it fits ``client``'s common column."""
        return check_update(data, where, client=self.index, round=round, fits=state_arrays(client.common),
                            column="its common column")

    def node_state(self) -> dict:
        raise NotImplementedError

    def load_node_state(self, saved: dict) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything the node needs for its next request, as one uint8 array."""
        return pack_state(self.state_key, self.node_state() | {"counters": self.counts()})

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        saved = unpack_state(self.state_key, state, f"client {self.index}")
        self.load_counts(saved["counters"])
        self.load_node_state(saved)


class CHFLHost(ClientNode):
    """Client party ``index`` of a CHFL run, holding only its own part of the data (``rows``)."""

    state_key = "chfl"

    def __init__(
        self, config: dict, index: int, *, rows: NodePart, state: dict[str, np.ndarray] | None = None
    ):
        super().__init__(index, rows)
        self.settings = chfl_config_settings(config)
        self.plan = Plan(self.settings, config["chfl.method"], config["seed"], len(rows.features.common),
                         rows.n_classes)
        self.client: Client | None = None
        self.lr_index, self.round = -1, -1  # the federation and round last played
        self.selector = Selector()
        self.commons: dict[tuple[float, int], dict[str, np.ndarray]] = {}
        if state:
            self.load_state_dict(state)

    def _fresh(self, lr: float) -> Client:
        return build_clients(self.plan, self.part.unique_sizes, lr, {self.index: self.part.data})[self.index]

    def on_setup(self, env: Envelope) -> Envelope:
        fs = self.part.features
        reply = SetupReply(client=self.index, **self.part.sizes(), common=fs.common.tolist(),
                           unique=fs.unique[self.index].tolist(), lr_index=self.lr_index, round=self.round)
        return Envelope(SETUP, env.round, info=reply.info())

    # -- a round -------------------------------------------------------------------------------
    def _check_round(self, env: Envelope) -> tuple[int, bool, int]:
        s, t = self.settings, env.round
        where = f"client {self.index}, round request"
        request = RoundRequest.read(env.info, where, t=t, lrs=len(s.lrs), rounds=s.rounds,
                                    local_epochs=s.local_epochs)
        i, validate, epochs = request.lr_index, request.validate, request.epochs
        if not 0 <= t <= s.rounds:
            raise ProtocolError(f"{where}: round {t} is outside 0..chfl.rounds = {s.rounds}")
        if i < self.lr_index or (i == self.lr_index and t <= self.round):
            raise ProtocolError(f"{where}: learning rate {i}, round {t} after learning rate {self.lr_index}, "
                                f"round {self.round}: requests must move forward")
        want = 1 if self.plan.federated else 0
        if len(env.parts) != want:
            raise ProtocolError(f"{where}: expected {want} model message(s), received {len(env.parts)}")
        return i, validate, epochs

    def on_round(self, env: Envelope) -> Envelope:
        i, validate, epochs = self._check_round(env)
        t, lr = env.round, self.settings.lrs[i]
        client = self._fresh(lr) if i != self.lr_index else self.client
        where = f"client {self.index}: "
        msg = self.global_column(env.parts[0], where, client, t) if self.plan.federated else None
        # every check passed: from here on the request changes the node
        self.client, self.lr_index, self.round = client, i, t
        if msg is not None:
            self.received(env.parts[0])
            client.receive(msg)
        reply = RoundReply(n_train=client.n_train)
        if validate:
            reply.val = validate_client(client, self.selector, lr, t)
            if msg is not None:
                keep_common(self.commons, self.selector, lr, t, msg.tensors)
        parts = []
        if epochs:
            update = train_and_upload(client, epochs, self.plan.federated)
            if update is not None:
                parts.append(self.sent(encode_update(update)))
        return Envelope(ROUND, t, parts, reply.info())

    # -- the end ---------------------------------------------------------------------------------
    def on_finish(self, env: Envelope) -> Envelope:
        client = self.client if self.client is not None else self._fresh(self.settings.lrs[-1])
        try:
            picks = score_choices(
                client, self.selector, self.commons, variants_of(self.plan.method, self.settings)
            )
        except ValueError as exc:  # no round was scored on this node
            raise ProtocolError(f"client {self.index}: {exc}") from None
        choices = {name: asdict(ch) for name, ch in picks.items()}
        reply = FinishReply(choices=json.dumps(choices), up=self.up, down=self.down, messages=self.messages)
        return Envelope(FINISH, env.round, [], reply.info())

    # -- state -----------------------------------------------------------------------------------
    def node_state(self) -> dict:
        """The position, the client (its columns, heads, Adam states and shuffling generator) and the
        validation records with their snapshots and the global columns they were scored with."""
        return {"lr_index": self.lr_index, "round": self.round,
                "client": None if self.client is None else self.client.state(),
                } | records_state(self.selector, self.commons)

    def load_node_state(self, saved: dict) -> None:
        self.lr_index, self.round = int(saved["lr_index"]), int(saved["round"])
        if saved["client"] is not None:
            self.client = self._fresh(self.settings.lrs[self.lr_index])
            self.client.load_state(saved["client"])
        self.commons = load_records(self.selector, saved)


class StreamHost(ClientNode):
    """Client party ``index`` of a streaming CHFL run, holding only its own rows (``rows``)."""

    state_key = "chfl-stream"

    def __init__(self, config: dict, index: int, *, rows: StreamPart, state: dict | None = None):
        super().__init__(index, rows)
        self.settings = s = stream_config_settings(config)
        method, seed = config["chfl.method"], config["seed"]
        self.federated = method != "local"
        _, drawn = draw_parties(rows.layout, s, method, seed, rows.n_classes, index + 1)
        client = stream_client(index, rows.view, drawn[index], s, method, seed)
        self.party = StreamParty(client, rows.layout.join_tick[index], s.batch)
        self.tick = -1  # the last tick played
        if state:
            self.load_state_dict(state)

    def on_setup(self, env: Envelope) -> Envelope:
        p = self.part
        return Envelope(SETUP, env.round, info=StreamSetupReply(
            client=self.index, tick=self.tick, n_rows=p.n_rows, n_features=p.n_features,
            n_common=len(p.layout.features.common), n_classes=p.n_classes,
            n_ticks=p.layout.n_ticks, join_tick=self.party.join_tick).info())

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
        msg = self.global_column(env.parts[0], f"{where}: ", self.party.client, None)
        self.received(env.parts[0])
        self.party.client.receive(msg)

    def on_round(self, env: Envelope) -> Envelope:
        a, where = env.round, f"client {self.index}, ticks from {env.round}"
        join, n_ticks = self.party.join_tick, self.part.layout.n_ticks
        request = SegmentRequest.read(env.info, where, t=a, n_ticks=n_ticks, federated=self.federated)
        if a < join or a <= self.tick:
            raise ProtocolError(f"{where}: the node joins at tick {join} and played up to tick "
                                f"{self.tick}: requests must move forward")
        self._global(env, where)  # the last check: from here on the request changes the node
        p = self.party.play(a, request.until, request.upload)
        self.tick = request.until - 1
        parts = [] if p.update is None else [self.sent(encode_update(p.update))]
        return Envelope(ROUND, a, parts, SegmentReply(correct=p.correct.astype(int).tolist()).info(),
                        arrays={"predicted": p.predicted.astype(np.int64),
                                "labels": p.labels.astype(np.int64)})

    def node_state(self) -> dict:
        return {"tick": self.tick, "since": self.party.since, "client": self.party.client.state()}

    def load_node_state(self, saved: dict) -> None:
        self.tick, self.party.since = int(saved["tick"]), int(saved["since"])
        self.party.client.load_state(saved["client"])
