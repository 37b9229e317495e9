"""The client party on its own node: a real :class:`fedstream.vfl.client.Client` behind envelopes.

:class:`ClientHost` receives encoded fedstream messages, decodes them with
:func:`fedstream.transport.codec.decode` (which validates them), hands them to its
:class:`~fedstream.vfl.client.Client`, and encodes what the client answers. It counts the bytes it
receives and sends in its own ledger, so both ends of every link count.

A host can be rebuilt from :meth:`ClientHost.state_dict` for every request (a Flower SuperNode runs
each message in a fresh ClientApp process): the state holds the client's model, optimiser window
and input window, the round it is at, whether it waits for a gradient, and its byte counts. The
forward pass an activated client keeps for its backward pass is not saved; it is recomputed from
the restored weights and inputs, which gives the same numbers.
"""

from __future__ import annotations

import hashlib

import numpy as np

from fedstream.data import Stream
from fedstream.deploy.link import FINISH, QUERY, ROUND, SETUP, Envelope
from fedstream.deploy.parties import build_activation, build_client, client_rows, own_activation
from fedstream.errors import ProtocolError
from fedstream.transport.codec import decode, encode
from fedstream.vfl.engine import feature_blocks
from fedstream.vfl.messages import Gradient, Message, Query


def model_digest(params: list[np.ndarray]) -> str:
    """sha256 over a model's parameters (shape, dtype and bytes): equal digests, equal models."""
    h = hashlib.sha256()
    for p in params:
        h.update(f"{p.dtype.str}{p.shape}".encode())
        h.update(np.ascontiguousarray(p).tobytes())
    return h.hexdigest()


class ClientHost:
    """Client party ``index`` of a run, fed its own feature block of ``stream``."""

    def __init__(self, config: dict, index: int, *, stream: Stream, state: dict[str, np.ndarray] | None = None):
        self.config, self.index, self.stream = config, index, stream
        n_features, M = stream.source.n_features, config["vfl.clients"]
        self.block = feature_blocks(n_features, M)[index] if 0 <= index < M else None
        self.client = build_client(config, index, n_features)  # validates the index
        self.activation = build_activation(config)
        self.round = -1  # last round observed
        self.awaiting_gradient = False  # activated in self.round and no gradient applied yet
        self.up = self.down = self.messages = 0
        if state is not None:
            self.load_state_dict(state)

    # -- requests ----------------------------------------------------------------------------
    def handle(self, env: Envelope) -> Envelope:
        """Answer one request from the server."""
        if env.kind == SETUP:
            return Envelope(SETUP, env.round, info={"client": self.index, "n_features": self.stream.source.n_features,
                                                    "block_start": self.block.start, "block_stop": self.block.stop})
        if env.kind == ROUND:
            return self._on_round(env)
        if env.kind == QUERY:
            query = self._receive(env.payload, Query)
            if query.round != self.round or self.awaiting_gradient:
                raise ProtocolError(f"client {self.index}: query for round {query.round}, but it is at round "
                                    f"{self.round}{' and was activated' if self.awaiting_gradient else ''}")
            return Envelope(QUERY, query.round, self._send(self.client.on_query(query)))
        if env.kind == FINISH:
            self._deliver(env.payload)
            params = self.client.model.parameters()
            info = {"client": self.index, "round": self.round, "up": self.up, "down": self.down,
                    "messages": self.messages, "digest": model_digest(params)}
            arrays = {f"param{i}": p for i, p in enumerate(params)} if env.info.get("models") else {}
            return Envelope(FINISH, self.round, info=info, arrays=arrays)
        raise ProtocolError(f"client {self.index}: unknown request kind {env.kind!r}")

    def _on_round(self, env: Envelope) -> Envelope:
        t = env.round
        if t <= self.round:
            raise ProtocolError(f"client {self.index}: request for round {t}, but it is already at round {self.round}")
        self._deliver(env.payload)
        rows = client_rows(self.stream, t, 1, self.block)
        self.client.observe(t, rows[0])
        self.round = t
        if own_activation(self.activation, self.index, self.config["vfl.clients"], t, rows):
            self.awaiting_gradient = True
            return Envelope(ROUND, t, self._send(self.client.on_event(t)))
        return Envelope(ROUND, t)  # passive: nothing to push; the server will query

    def _deliver(self, payload: bytes) -> None:
        """Apply the gradient of the previous round, if one rides on this request."""
        if not payload:
            if self.awaiting_gradient:
                raise ProtocolError(f"client {self.index}: activated in round {self.round} but no gradient arrived")
            return
        grad = self._receive(payload, Gradient)
        if not self.awaiting_gradient or grad.round != self.round:
            raise ProtocolError(f"client {self.index}: gradient for round {grad.round}, but it "
                                f"{'is waiting for round ' + str(self.round) if self.awaiting_gradient else 'expects none'}")
        self.client.on_gradient(grad)
        self.awaiting_gradient = False

    def _receive(self, data: bytes, kind: type) -> Message:
        msg = decode(data)  # validates header, length and finiteness
        if type(msg) is not kind or msg.client != self.index:
            raise ProtocolError(f"client {self.index}: expected a {kind.__name__} for client {self.index}, "
                                f"received a {type(msg).__name__} for client {msg.client}")
        self.down += len(data)
        self.messages += 1
        return msg

    def _send(self, msg: Message) -> bytes:
        data = encode(msg)
        self.up += len(data)
        self.messages += 1
        return data

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        meta = [self.round, int(self.awaiting_gradient), self.up, self.down, self.messages]
        return {f"client.{k}": v for k, v in self.client.state_dict().items()} | {"host": np.array(meta, np.int64)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.client.load_state_dict({k[len("client."):]: v for k, v in state.items() if k.startswith("client.")})
        self.round, awaiting, self.up, self.down, self.messages = (int(v) for v in state["host"])
        self.awaiting_gradient = bool(awaiting)
        # Client.state_dict() leaves out the round, which only guards the order of messages
        self.client._round = self.round
        if self.awaiting_gradient:  # recompute the forward state kept for the backward pass
            self.client.on_event(self.round)
