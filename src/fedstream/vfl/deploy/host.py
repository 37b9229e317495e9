"""A batch VFL client party on its own node: the simulator's :class:`~fedstream.vfl.parties.BatchClient`
and the client's end of the compressed link (:class:`~fedstream.transport.compressed.ClientEndpoint`)
answering the server's requests (:mod:`fedstream.vfl.deploy.records`). Every request is checked
before anything changes. A node rebuilt from its state (a fresh process, a rejoin) has lost the due
step's autograd graph: it saved its model as it was before that step's forward pass and recomputes
it when the gradient arrives (``recomputed``); a long-lived node keeps the graph, as the simulator
does. docs/deploy-protocol.md, "Batch VFL", has the requests, the checks and the state.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from fedstream.deploy.archive import pack_state, unpack_state
from fedstream.deploy.host import FinishReply, NodeHost, model_digest
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope
from fedstream.errors import ProtocolError
from fedstream.transport.codec import decode, encode
from fedstream.transport.compressed import ClientEndpoint, down_codec
from fedstream.transport.messages import Gradient
from fedstream.vfl.deploy.data import ClientBlock, batch_settings, layout
from fedstream.vfl.deploy.records import (
    FinishRequest,
    SetupReply,
    TestRequest,
    TrainRequest,
    check_message,
    read_request,
)
from fedstream.vfl.deploy.table import TableBlock, table_layout
from fedstream.vfl.deploy.vfps import DISTANCES, QUERIES, local_distances
from fedstream.vfl.deploy.vfps import decode as decode_vfps
from fedstream.vfl.deploy.vfps import encode as encode_vfps
from fedstream.vfl.trainer import build_parties

STATE = "vfl"  # the key of the node's state archive in state_dict()


def warm_up(index: int) -> None:
    """Decode one tiny gradient at setup: the process's first decode loads compiled code, a one-off
    cost that belongs to the setup, not to the first training step's round trip."""
    decode(encode(Gradient(0, index, np.zeros((1, 1), np.float32))))


class BatchVFLHost(NodeHost):
    """Client party ``index`` of a batch VFL run, holding only its own strip of the images (``rows``)."""

    single_thread = True  # as the simulator runs: the same float sums in the same order

    def __init__(
        self, config: dict, index: int, *, rows: ClientBlock | TableBlock,
        state: dict[str, np.ndarray] | None = None,
    ):
        if rows.index != index:
            raise ProtocolError(f"client {index}: its data block is client {rows.index}'s")
        super().__init__(index)
        self.config, self.block = config, rows
        self.settings = s = batch_settings(config)
        if s.own_draws:  # a table with one file per party: its own width, its own draw (n_classes unused)
            shapes = table_layout(s.clients, 2, {index: tuple(rows.sizes()["shape"])})
        else:
            shapes = layout(s)
            want = list(shapes.strip_shapes()[index])
            if rows.sizes()["shape"] != want:
                raise ProtocolError(
                    f"client {index}: its block has images of shape {rows.sizes()['shape']}, expected {want}"
                )
        self.client = build_parties(s, shapes, config["seed"])[0][index]  # the simulator's initial weights
        self.end = ClientEndpoint(index, s.compression)
        down = down_codec(s.compression)
        self.probe = None if down is None else down[1]  # stateless: checks a gradient before anything changes
        self.setting = f"compression.down = {s.compression.down!r}"
        self.pending: tuple[int, np.ndarray] | None = None  # (step, rows) whose gradient is due
        self.before: dict | None = None  # model and optimiser before the due step's forward pass
        self.last_step = -1  # the last training step embedded
        self.recomputed = 0  # forward passes run again (the graph was lost: a new process, a reload)
        self.eval_up = 0
        self.select_up = self.select_down = 0  # VF-PS: distance messages sent, query messages received
        if state:
            self.load_state_dict(state)

    def on_setup(self, env: Envelope) -> Envelope:
        warm_up(self.index)
        reply = SetupReply(client=self.index, **self.block.sizes(), step=self.last_step,
                           pending=-1 if self.pending is None else self.pending[0])
        return Envelope(SETUP, env.round, info=reply.info())

    def on_round(self, env: Envelope) -> Envelope:
        n = self.block.sizes()["n_test" if env.info.get("split") == "test" else "n_train"]
        request = read_request(env.info, f"client {self.index}, step {env.round}", n=n, step=env.round)
        rows = None if request.rows is None else np.array(request.rows, dtype=np.int64)
        if isinstance(request, TrainRequest):
            return self._train(env, rows)
        if isinstance(request, TestRequest):
            return self._evaluate(env, rows, request)
        return self._select(env, rows, request.queries)

    def on_finish(self, env: Envelope) -> Envelope:
        request = FinishRequest.read(env.info, f"client {self.index}, finish")
        self._settle(env)
        state = self.client.model.state_dict()
        reply = FinishReply(client=self.index, up=self.up, down=self.down, eval_up=self.eval_up,
                            select_up=self.select_up, select_down=self.select_down,
                            digest=model_digest({k: v.detach().numpy() for k, v in state.items()}))
        arrays = {k: v.detach().numpy().copy() for k, v in state.items()} if request.models is True else {}
        return Envelope(FINISH, env.round, [], reply.info(), arrays)

    def _gradient(self, env: Envelope) -> Gradient | None:
        """The gradient riding with ``env``, checked against the embedding it is for (None: none)."""
        where = f"client {self.index}, {env.kind} request for step {env.round}"
        if len(env.parts) > 1:
            raise ProtocolError(f"{where}: expected at most one gradient, received {len(env.parts)} parts")
        if not env.parts:
            return None
        if self.pending is None:
            raise ProtocolError(
                f"{where}: a gradient arrived, but no embedding of this node is waiting for one"
            )
        step, rows = self.pending
        shape = (len(rows), self.settings.embedding)
        # compressed exactly as compression.down says; a frame's shape checked before its payload is read
        try:
            return check_message(env.parts[0], self.probe, Gradient, self.setting, shape, client=self.index,
                                 step=step, what="the gradient")
        except ProtocolError as exc:
            raise ProtocolError(f"{where}: {exc}"[:500]) from None

    # -- what changes the node ---------------------------------------------------------------------
    def _settle(self, env: Envelope) -> None:
        """Check the gradient riding with ``env`` (:meth:`_gradient`), then apply it (recomputing its
        forward pass if this process did not run it), or drop the due step when none came."""
        grad = self._gradient(env)
        if self.pending is None:
            return
        step, rows = self.pending
        if grad is None:  # the server had no gradient for us: the step never happened here
            self._restore(self.before)
            self.client.drop()
        else:
            if self.client.pending_step != step:
                self.client.embed(step, self.block.inputs("train", rows))  # the same forward pass again
                self.recomputed += 1
            data = env.parts[0]
            self.client.on_gradient(self.end.receive(data))  # the real end: topk-grad ranks by it
            self.down += len(data)
        self.pending = self.before = None

    def _snapshot(self) -> dict:
        return {"model": {k: v.detach().clone() for k, v in self.client.model.state_dict().items()},
                "optimizer": copy.deepcopy(self.client.optimizer.state_dict())}

    def _restore(self, saved: dict | None) -> None:
        if saved is not None:
            self.client.model.load_state_dict(saved["model"])
            self.client.optimizer.load_state_dict(saved["optimizer"])

    def _train(self, env: Envelope, rows: np.ndarray) -> Envelope:
        step = env.round
        if step <= self.last_step:
            raise ProtocolError(
                f"client {self.index}: training step {step} after step {self.last_step}: steps must "
                "move forward"
            )
        # the last check is the gradient's (in _settle): from there on the request changes the node
        self._settle(env)
        self.before = self._snapshot()
        data = self.end.send(self.client.embed(step, self.block.inputs("train", rows)), samples=rows)
        self.up += len(data)
        self.pending, self.last_step = (step, rows), step
        return Envelope(ROUND, step, [data], {})

    def _evaluate(self, env: Envelope, rows: np.ndarray, request: TestRequest) -> Envelope:
        sizes, steps = request.sizes, request.steps
        self._settle(env)
        parts, n_train = [], self.block.sizes()["n_train"]
        for step, chunk in zip(steps, np.split(rows, np.cumsum(sizes)[:-1])):
            # sample ids as the simulator's (test rows after the training ones): error feedback's key
            msg = self.client.infer(step, self.block.inputs("test", chunk))
            data = self.end.send(msg, samples=n_train + chunk)
            self.eval_up += len(data)
            parts.append(data)
        return Envelope(ROUND, env.round, parts, {})

    def _select(self, env: Envelope, idx: np.ndarray | None, Q: int) -> Envelope:
        """VF-PS: the local squared distances of this node's strip from each query to every available
        training row, as one distance message; nothing of the node changes (a due gradient waits)."""
        where = f"client {self.index}, VF-PS request for epoch {env.round}"
        n = self.block.sizes()["n_train"]
        avail = n if idx is None else len(idx)
        if len(env.parts) != 1:
            raise ProtocolError(f"{where}: expected one query message, received {len(env.parts)} parts")
        q = decode_vfps(env.parts[0], kind=QUERIES, round=env.round, client=self.index, shape=(1, Q))[0]
        q = q.astype(np.int64)
        if q.max() >= avail or (np.diff(q) <= 0).any():
            raise ProtocolError(f"{where}: query ids must be increasing rows in 0..{avail - 1}")
        features = self.block.train_x.reshape(n, -1)  # the raw strip: what the simulator's VF-PS scores
        if idx is not None:
            features = features[idx]
        data = encode_vfps(DISTANCES, env.round, self.index, local_distances(features, q))
        self.select_down += len(env.parts[0])
        self.select_up += len(data)
        return Envelope(ROUND, env.round, [data], {})

    # -- between messages ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything the node needs for its next request: one ``torch.save`` archive as a uint8
        array (read back with ``weights_only=True``)."""
        saved = self.before if self.pending is not None else self._snapshot()
        state = {
            **saved,
            "end": {k: torch.from_numpy(np.array(v)) for k, v in self.end.state_dict().items()},
            "pending": None if self.pending is None else [self.pending[0], torch.from_numpy(self.pending[1])],
            "last_step": self.last_step,
            "counters": [self.up, self.down, self.eval_up, self.select_up, self.select_down],
        }
        return pack_state(STATE, state)

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        saved = unpack_state(STATE, state, f"client {self.index}")
        self._restore(saved)
        self.end.load_state_dict({k: v.numpy() for k, v in saved["end"].items()})
        if saved["pending"] is not None:
            self.pending = (int(saved["pending"][0]), saved["pending"][1].numpy())
            self.before = {"model": saved["model"], "optimizer": saved["optimizer"]}
        self.last_step = int(saved["last_step"])
        counters = [int(v) for v in saved["counters"]] + [0, 0]  # states saved before VF-PS hold three
        self.up, self.down, self.eval_up, self.select_up, self.select_down = counters[:5]
