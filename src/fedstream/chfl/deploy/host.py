"""A CHFL client party on its own node: one :class:`fedstream.chfl.client.Client` behind envelopes.

:class:`CHFLHost` answers the server's requests (see :mod:`fedstream.chfl.deploy.proxy` for the
server's side) with the simulator's code for one client's side of a round
(:mod:`fedstream.chfl.trainer`: :func:`~fedstream.chfl.trainer.build_clients`,
:func:`~fedstream.chfl.trainer.validate_client`, :func:`~fedstream.chfl.trainer.keep_common`,
:func:`~fedstream.chfl.trainer.train_and_upload`, :func:`~fedstream.chfl.trainer.score_choices`):

* ``setup``: the node's sizes (rows per split, features, classes) and its column indices: the
  server needs the common width to draw the initial global column, and no data. Also where the
  node is (``lr_index``, ``round``: the federation and round it last played, -1 and -1 for a
  fresh party): a node set up with ``rejoin`` resumes from its checkpoint
  (:mod:`fedstream.deploy.session`) and the server checks it is not ahead of the run.
* ``round`` (round t of the federation ``info["lr_index"]``): the part is θ^t, an encoded
  :class:`~fedstream.transport.updates.ModelUpdate` (none for the Local baseline). The node loads it,
  with ``info["validate"]`` scores its candidates on its validation rows and keeps the best
  (lr, candidate, round) snapshot, with ``info["epochs"]`` trains that many local epochs and
  replies its common column (encoded) and its best validation accuracy (a number). A request of
  a new ``lr_index`` starts a new federation with fresh, identically seeded weights.
* ``finish``: each result variant's choice scored on the test rows: numbers only (learning rate,
  candidate, round, validation and test accuracy), and the node's byte counts.

The validation rows, the snapshots and the choice never leave the node. Every request is
checked before anything changes (kind, round order, learning-rate index, flags, the model's
sender, round, tensor names and shapes against the node's common column, finite values).

Flower runs each message in a fresh process: :meth:`CHFLHost.state_dict` holds everything
(the client's columns, heads, Adam states and shuffling generator, the validation records with
their snapshots, the global columns they were scored with, the position and byte counts) as one
``torch.save`` archive (a uint8 array), read back with ``weights_only=True``.
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
from fedstream.chfl.deploy.data import NodePart, chfl_config_settings
from fedstream.chfl.deploy.records import RoundReply, RoundRequest, SetupReply, check_update
from fedstream.chfl.models import state_arrays
from fedstream.chfl.plan import Plan, build_clients
from fedstream.chfl.selection import Selector
from fedstream.chfl.trainer import variants_of
from fedstream.deploy.archive import pack_state, unpack_state
from fedstream.deploy.host import FinishReply, NodeHost
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope
from fedstream.errors import ProtocolError
from fedstream.transport.tensors import encode_update
from fedstream.transport.updates import ModelUpdate

STATE = "chfl"  # the key of the node's state archive in state_dict()


class CHFLHost(NodeHost):
    """Client party ``index`` of a CHFL run, holding only its own part of the data (``rows``)."""

    single_thread = True  # as the simulator runs (run_on_table): the same float sums in the same order

    def __init__(
        self, config: dict, index: int, *, rows: NodePart, state: dict[str, np.ndarray] | None = None
    ):
        if rows.index != index:
            raise ProtocolError(f"client {index}: its data part is client {rows.index}'s")
        super().__init__(index)
        self.config, self.part = config, rows
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

    def _model(self, data: bytes, t: int, client: Client) -> ModelUpdate:
        """Decode θ^t (header, length, finite values) and check it fits this client's common column."""
        return check_update(data, f"client {self.index}: ", client=self.index, round=t,
                            fits=state_arrays(client.common), column="its common column")

    def on_round(self, env: Envelope) -> Envelope:
        i, validate, epochs = self._check_round(env)
        t, lr = env.round, self.settings.lrs[i]
        client = self._fresh(lr) if i != self.lr_index else self.client
        msg = self._model(env.parts[0], t, client) if self.plan.federated else None
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
    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything the node needs for its next request, as one uint8 array (see the module doc)."""
        state = {
            "lr_index": self.lr_index,
            "round": self.round,
            "counters": self.counts(),
            "client": None if self.client is None else self.client.state(),
        } | records_state(self.selector, self.commons)
        return pack_state(STATE, state)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        saved = unpack_state(STATE, state, f"client {self.index}")
        self.lr_index, self.round = int(saved["lr_index"]), int(saved["round"])
        self.load_counts(saved["counters"])
        if saved["client"] is not None:
            self.client = self._fresh(self.settings.lrs[self.lr_index])
            self.client.load_state(saved["client"])
        self.commons = load_records(self.selector, saved)
