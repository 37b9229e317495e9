"""The client party on its own node: a real :class:`fedstream.ovfl.client.Client` behind envelopes.

:class:`ClientHost` receives encoded fedstream messages, decodes them with
:func:`fedstream.deploy.records.peek` (which validates them), hands them to its
:class:`~fedstream.ovfl.client.Client`, and encodes what the client answers. It counts the bytes it
receives and sends in its own ledger, so both ends of every link count.

One ``round`` request is a batch of B events (``network.batch``, see :mod:`fedstream.deploy.records`).
For each event, in order, the host observes the node's feature block, decides from it alone
whether the event activates the node, and computes the embedding: pushed when activated, the
answer to the server's query when passive. With a server-side policy (``topl``) the request says
which events activate the node (``info["active"]``) and carries no query: an event that leaves
the node out costs nothing, no message and no optimiser skip (the server pads it), as in the
simulator, where the client is not part of that round. Embeddings are computed with the weights
the node has at the start of the batch, because the gradients of the batch come back with the next request.
There they are applied in round order, each through the forward state of its own event, and a
passive event's "zero into the optimiser's window" (``optimizer.skip``) is applied at its place
in that order too. With B = 1 this is exactly the simulator's sequence of operations: a passive
client's skip and an activated client's step happen before its next observation either way.

With compression (``compression.*``) the host holds the client's end of its link
(:class:`~fedstream.transport.compressed.ClientEndpoint`): it encodes every embedding it sends
with the uplink codec, and decodes every gradient it receives with the downlink codec when it
applies it, which also shows it to ``topk-grad``'s ranking, so an embedding is ranked by the last
gradient the node received: with B = 1 the previous round's, as in the simulator; with B > 1 the
last one of the previous batch for every embedding of the batch. A request's gradients are first
checked with a stateless decoder (:func:`fedstream.deploy.records.peek`), so a malformed request
changes nothing, the ranking included.

A host can be rebuilt from :meth:`ClientHost.state_dict` for every request (a Flower SuperNode runs
each message in a fresh ClientApp process): the state holds the client's model, optimiser window
and input window, the round it is at, the events of the last batch with the forward state of the
activated ones (copied: the model reuses its buffers), its end of the compressed link (the last
gradient ``topk-grad`` ranks by) and its byte counts.
"""

from __future__ import annotations

import numpy as np

from fedstream.deploy.host import FinishReply, NodeHost, model_digest
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope, peek
from fedstream.errors import ProtocolError
from fedstream.ovfl.client import Ticket
from fedstream.ovfl.deploy.parties import (
    build_activation,
    build_client,
    own_activation,
    server_decides,
)
from fedstream.ovfl.deploy.records import FinishRequest, RoundReply, RoundRequest, SetupReply
from fedstream.ovfl.deploy.rows import BlockRows, PartyRows
from fedstream.transport.compressed import ClientEndpoint, CompressionSpec, down_codec
from fedstream.transport.messages import Gradient, Message, Query


class ClientHost(NodeHost):
    """Client party ``index`` of a run, fed its own feature block by ``rows``."""

    def __init__(
        self, config: dict, index: int, *, rows: BlockRows | PartyRows,
        state: dict[str, np.ndarray] | None = None,
    ):
        super().__init__(index)
        self.config, self.rows = config, rows
        if rows.index != index:
            raise ProtocolError(f"client {index}: its feature rows are client {rows.index}'s")
        self.client = build_client(config, index, rows.n_features)  # validates the index
        self.activation = build_activation(config)  # None: the server decides (topl)
        spec = CompressionSpec.from_config(config)
        # its end of the link: encodes embeddings, decodes (and observes) gradients
        self.end = ClientEndpoint(index, spec)
        down = down_codec(spec)
        # stateless: checks a gradient before the link sees it
        self._probe = (None if down is None else down[1])
        self._setting = f"compression.down = {spec.down!r}"
        self.round = -1  # last round observed
        # the events of the last batch, in order: (round, activated); activated ones wait for a gradient
        self.pending: list[tuple[int, bool]] = []
        self.acts: dict[int, list[np.ndarray]] = {}  # round -> forward state of an activated event
        if state is not None:
            self.load_state_dict(state)

    @property
    def awaiting(self) -> list[int]:
        """Rounds whose gradient this node waits for."""
        return [t for t, active in self.pending if active]

    # -- requests ----------------------------------------------------------------------------
    def on_setup(self, env: Envelope) -> Envelope:
        self.rows.rows(env.round, 1)  # read (and cache) the block of the first rounds now, not in round time
        reply = SetupReply(client=self.index, round=self.round, n_features=self.rows.n_features,
                           block_start=self.rows.block.start, block_stop=self.rows.block.stop,
                           ids=self.rows.ids, categorical=self.rows.categorical)
        return Envelope(SETUP, env.round, info=reply.info())

    def on_round(self, env: Envelope) -> Envelope:
        return self._on_batch(env, RoundRequest.read(env.info, f"client {self.index}"))

    def on_finish(self, env: Envelope) -> Envelope:
        request = FinishRequest.read(env.info, f"client {self.index}")
        self._deliver(self._gradients(env.parts, self._grad_rounds(request.grad_rounds, len(env.parts))))
        params = self.client.model.parameters()
        reply = FinishReply(client=self.index, round=self.round, up=self.up, down=self.down,
                            messages=self.messages, digest=model_digest(params))
        arrays = {f"param{i}": p for i, p in enumerate(params)} if request.models else {}
        return Envelope(FINISH, self.round, info=reply.info(), arrays=arrays)

    def _on_batch(self, env: Envelope, request: RoundRequest) -> Envelope:
        """Check the whole request first (nothing changes if it is malformed), then play the batch."""
        t0, n = env.round, request.events
        if t0 <= self.round:
            raise ProtocolError(
                f"client {self.index}: request for round {t0}, but it is already at round {self.round}"
            )
        decided = self._decided(request)
        n_queries = 0 if decided is not None else n
        rounds = self._grad_rounds(request.grad_rounds, len(env.parts) - n_queries)
        g = len(rounds)
        if len(env.parts) != g + n_queries:
            raise ProtocolError(
                f"client {self.index}: expected {g} gradient(s) and {n_queries} queries in the request "
                f"for round {t0}, received {len(env.parts)} messages"
            )
        grads = self._gradients(env.parts[:g], rounds)
        queries = [self._decode(data, Query, t0 + i) for i, data in enumerate(env.parts[g:])]
        self._deliver(grads)
        rows = self.rows.rows(t0, n)
        embeddings, active = [], []
        for i in range(n):
            t = t0 + i
            self.client.observe(t, rows[i])
            self.round = t
            if decided is not None:
                on = bool(decided[i])
            else:
                on = own_activation(self.activation, self.index, self.config["vfl.clients"], t, rows[i:i + 1])
                on = on and self.rows.holds(t)  # an id it lacks (per-party files): passive
            if on:
                msg, ticket = self.client.embed(t, copy=True)  # copied: the model reuses its buffers
                self.acts[t] = ticket.acts
            elif decided is not None:  # left out by the server: not queried, no message, no optimiser skip
                active.append(0)
                continue
            else:
                self.received(env.parts[g + i])  # the query is used: it counts
                msg = self.client.answer(queries[i])  # its skip waits for its place in the next request
            active.append(int(on))
            embeddings.append(self._send(msg))
            self.pending.append((t, on))
        return Envelope(ROUND, t0, embeddings, info=RoundReply(active=active).info())

    def _decided(self, request: RoundRequest) -> list[int] | None:
        """The server's activation of each of the request's events (``active``) when the run's
        policy is the server's; None when this node decides itself. A request that does not match
        the run's policy is refused."""
        name = self.config["activation.name"]
        if not server_decides(self.config):
            if request.active is not None:
                raise ProtocolError(
                    f"client {self.index}: activation.name = {name!r} is decided by the node, "
                    "but the request carries info 'active'"
                )
            return None
        if request.active is None:
            raise ProtocolError(
                f"client {self.index}: activation.name = {name!r} is the server's: the request "
                f"needs info 'active', a list of {request.events} zeros and ones"
            )
        return request.active

    def _grad_rounds(self, rounds: list[int], most: int) -> list[int]:
        """The rounds of the gradients that lead the request's parts (at most ``most``)."""
        if len(rounds) > max(most, 0):
            raise ProtocolError(
                f"client {self.index}: info 'grad_rounds' must list the rounds of the request's "
                f"gradients (at most {max(most, 0)}), received {rounds!r}"[:300]
            )
        return rounds

    def _gradients(self, parts: list[bytes], rounds: list[int]) -> dict[int, tuple[Gradient, bytes]]:
        """Decode and check the gradients of rounds ``rounds`` (activated events this node waits for)."""
        awaiting = self.awaiting
        if not set(rounds) <= set(awaiting) or rounds != sorted(set(rounds)):
            raise ProtocolError(
                f"client {self.index}: gradients for rounds {rounds}, but it waits for rounds {awaiting}"[
                    :300
                ]
            )
        out = {}
        for t, data in zip(rounds, parts, strict=True):
            want = self.acts[t][-1].shape
            grad = self._decode(data, Gradient, t, want)
            if grad.values.shape != want:
                raise ProtocolError(
                    f"client {self.index}: gradient for round {t} has shape {grad.values.shape}, "
                    f"its embedding had {want}"
                )
            out[t] = (grad, data)
        return out

    def _deliver(self, grads: dict[int, tuple[Gradient, bytes]]) -> None:
        """Apply the last batch's gradients and skips in round order. An activated event whose
        gradient is not in ``grads`` was lost with a failed request: it counts as a skip too."""
        for t, active in self.pending:
            if not active or t not in grads:
                self.client.skip()
                self.acts.pop(t, None)
                continue
            _, data = grads[t]
            self.received(data)
            grad = self.end.receive(data)  # checked already; a topk-grad link's ranking sees it now
            self.client.apply(Ticket(t, self.acts.pop(t)), grad)
        self.pending = []

    def _decode(self, data: bytes, kind: type, t: int, shape: tuple[int, int] | None = None) -> Message:
        """Decode (header, codec, length, finite values; a compressed gradient's ``shape`` before its
        payload) without changing any state, and check type, recipient and round."""
        msg = peek(data, self._probe, Gradient, self._setting, shape)
        if type(msg) is not kind or msg.client != self.index or msg.round != t:
            raise ProtocolError(
                f"client {self.index}: expected a {kind.__name__} for client {self.index}, round {t}, "
                f"received a {type(msg).__name__} for client {msg.client}, round {msg.round}"
            )
        return msg

    def _send(self, msg: Message) -> bytes:
        return self.sent(self.end.send(msg))  # compressed when the uplink compresses

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        meta = np.array([self.round, self.up, self.down, self.messages], np.int64)
        pending = np.array(self.pending, np.int64).reshape(-1, 2)
        acts = {f"acts.{t}.{j}": a for t, layers in self.acts.items() for j, a in enumerate(layers)}
        link = {f"link.{k}": v for k, v in self.end.state_dict().items()}
        return {f"client.{k}": v for k, v in self.client.state_dict().items()} | {
            "host": meta, "pending": pending} | acts | link

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.client.load_state_dict(
            {k[len("client.") :]: v for k, v in state.items() if k.startswith("client.")}
        )
        self.round, self.up, self.down, self.messages = (int(v) for v in state["host"])
        self.end.load_state_dict({k[len("link."):]: v for k, v in state.items() if k.startswith("link.")})
        self.pending = [(int(t), bool(a)) for t, a in state["pending"]]
        self.acts = {}
        for key in sorted(
            (k for k in state if k.startswith("acts.")), key=lambda k: tuple(map(int, k.split(".")[1:]))
        ):
            _, t, _ = key.split(".")
            self.acts.setdefault(int(t), []).append(np.array(state[key]))
        if sorted(self.acts) != self.awaiting:
            raise ProtocolError(
                f"client {self.index}: saved state holds forward states for rounds {sorted(self.acts)}, "
                f"expected {self.awaiting}"
            )
