"""The client party on its own node: a real :class:`fedstream.ovfl.client.Client` behind envelopes.

:class:`ClientHost` checks each request whole before it changes anything, then plays its batch:
first the previous batch's gradients and skips in round order, then each event's embedding at the
weights of the batch's start, in compiled calls where :func:`~fedstream.ovfl.party_kernels.kernels_apply`
says so, else through the client's own methods (the reference). The protocol:
docs/deploy-protocol.md, "Event batching".
"""

from __future__ import annotations

import numpy as np

from fedstream.deploy.host import FinishReply, NodeHost, model_digest
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope, peek
from fedstream.errors import ProtocolError
from fedstream.ovfl.activation import activation_from_config
from fedstream.ovfl.client import Ticket
from fedstream.ovfl.deploy.parties import (
    build_client,
    own_activations,
    server_decides,
)
from fedstream.ovfl.deploy.records import FinishRequest, RoundReply, RoundRequest, SetupReply
from fedstream.ovfl.deploy.rows import BlockRows, PartyRows
from fedstream.ovfl.party_kernels import PartyArrays, batched, kernels_apply, pack, unpack
from fedstream.runs.state import collect, restore
from fedstream.transport.compressed import ClientEndpoint, CompressionSpec, down_codec
from fedstream.transport.messages import Embedding, Gradient, Message, Query


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
        # its own policy, as the simulator builds it; None: the server decides (topl)
        self.activation = None if server_decides(config) else activation_from_config(config)
        self.kernel = PartyArrays(self.client) if kernels_apply(config, self.client) else None
        spec = CompressionSpec.from_config(config)
        self.end = ClientEndpoint(index, spec)  # its end of the link: encodes embeddings, decodes gradients
        down = down_codec(spec)  # its stateless decoder checks a gradient before the link sees it
        self._probe = None if down is None else down[1]
        self._setting = f"compression.down = {spec.down!r}"
        self.round = -1  # last round observed
        # the events of the last batch, in order: (round, activated); activated ones wait for a gradient
        self.pending: list[tuple[int, bool]] = []
        self.acts: dict[int, list[np.ndarray]] = {}  # round -> forward state of an activated event
        # the last batch's forward states as the compiled path computed them, (its first round, the
        # arrays): self.acts holds views of their rows, gathered back at once for its gradients
        self._states: tuple[int, list[np.ndarray]] | None = None
        if state is not None:
            self.load_state_dict(state)

    @property
    def awaiting(self) -> list[int]:
        """Rounds whose gradient this node waits for."""
        return [t for t, active in self.pending if active]

    def on_setup(self, env: Envelope) -> Envelope:
        self.rows.rows(env.round, 1)  # read (and cache) the block of the first rounds now, not in round time
        reply = SetupReply(client=self.index, round=self.round, n_features=self.rows.n_features,
                           block_start=self.rows.block.start, block_stop=self.rows.block.stop,
                           ids=self.rows.ids, categorical=self.rows.categorical)
        return Envelope(SETUP, env.round, info=reply.info())


    def on_finish(self, env: Envelope) -> Envelope:
        request = FinishRequest.read(env.info, f"client {self.index}")
        self._deliver(*self._gradients(env.parts, self._grad_rounds(request.grad_rounds, len(env.parts))))
        params = self.client.model.parameters()
        reply = FinishReply(client=self.index, round=self.round, up=self.up, down=self.down,
                            messages=self.messages, digest=model_digest(params))
        arrays = {f"param{i}": p for i, p in enumerate(params)} if request.models else {}
        return Envelope(FINISH, self.round, info=reply.info(), arrays=arrays)

    def on_round(self, env: Envelope) -> Envelope:
        """Check the whole request first (nothing changes if it is malformed), then play the batch."""
        request = RoundRequest.read(env.info, f"client {self.index}")
        t0, n = env.round, request.events
        if t0 <= self.round:
            raise ProtocolError(f"client {self.index}: request for round {t0}, but it is already at round "
                                f"{self.round}")
        decided = self._decided(request)
        n_queries = 0 if decided is not None else n
        rounds = self._grad_rounds(request.grad_rounds, len(env.parts) - n_queries)
        g = len(rounds)
        if len(env.parts) != g + n_queries:
            raise ProtocolError(f"client {self.index}: expected {g} gradient(s) and {n_queries} queries in "
                                f"the request for round {t0}, received {len(env.parts)} messages")
        grads = self._gradients(env.parts[:g], rounds)
        fast = self.kernel is not None and self.kernel.ready(n)
        queries = self._queries(env.parts[g:], t0, fast)
        self._deliver(*grads)
        rows = self.rows.rows(t0, n)
        if decided is not None:
            active = np.array(decided, bool)
        else:  # its own policy; an id it lacks (per-party files): passive
            active = own_activations(self.activation, self.index, self.config["vfl.clients"], t0, rows)
            active &= self.rows.holds(t0, n)
        played = [i for i in range(n) if decided is None or active[i]]  # the server left it out of the others
        if fast:  # the batch in one compiled call (fedstream.ovfl.party_kernels)
            states = self.kernel.embed(rows)
            self._states = (t0, states)
            parts = pack(Embedding, np.arange(t0, t0 + n), self.index, states[-1])
            embeddings = [self.sent(parts[i]) for i in played]
            self.acts |= {t0 + i: [s[i] for s in states] for i in played if active[i]}
        else:
            self._states = None
            asked = queries or [None] * n  # None: the server decides, and asks nothing
            embeddings = [self._send(msg) for i in range(n)
                          if (msg := self._embed(t0 + i, rows[i], active[i], asked[i])) is not None]
        for i in played:
            if not active[i]:
                self.received(env.parts[g + i])  # the query is used: it counts
        self.round = t0 + n - 1
        self.pending += [(t0 + i, bool(active[i])) for i in played]
        return Envelope(ROUND, t0, embeddings, info=RoundReply(active=[int(a) for a in active]).info())

    def _embed(self, t: int, row: np.ndarray, active: bool, query: Query | None) -> Message | None:
        """One event, observed: the embedding pushed when it activated the node (its forward state
        kept for the gradient), the answer to ``query``, or None when the server left it out."""
        self.client.observe(t, row)
        if active:
            msg, ticket = self.client.embed(t, copy=True)  # copied: the model reuses its buffers
            self.acts[t] = ticket.acts
            return msg
        return None if query is None else self.client.answer(query)

    def _queries(self, parts: list[bytes], t0: int, fast: bool) -> list[Query]:
        """The server's queries of rounds t0, t0 + 1, ... (none returned when checked at once for the
        compiled path)."""
        R = self.client.window
        if fast and unpack(parts, Query, np.arange(t0, t0 + len(parts)), self.index, (R, 0)) is not None:
            return []
        queries = [self._decode(data, Query, t0 + i) for i, data in enumerate(parts)]
        if fast and any(q.rows != R for q in queries):
            raise ProtocolError(f"client {self.index}: the queries of rounds {t0}.. ask for "
                                f"{sorted({q.rows for q in queries})} rows, its window holds {R}")
        return queries

    def _decided(self, request: RoundRequest) -> list[int] | None:
        """The server's activation of each event (``active``) when the run's policy is the server's;
        None when this node decides itself."""
        name = self.config["activation.name"]
        if not server_decides(self.config):
            if request.active is not None:
                raise ProtocolError(f"client {self.index}: activation.name = {name!r} is decided by the "
                                    "node, but the request carries info 'active'")
            return None
        if request.active is None:
            raise ProtocolError(f"client {self.index}: activation.name = {name!r} is the server's: the "
                                f"request needs info 'active', a list of {request.events} zeros and ones")
        return request.active

    def _grad_rounds(self, rounds: list[int], most: int) -> list[int]:
        """The rounds of the gradients that lead the request's parts (at most ``most``)."""
        if len(rounds) > max(most, 0):
            raise ProtocolError(f"client {self.index}: info 'grad_rounds' must list the rounds of the "
                                f"request's gradients (at most {max(most, 0)}), received {rounds!r}"[:300])
        return rounds

    def _gradients(self, parts: list[bytes], rounds: list[int]) -> tuple[dict[int, bytes], np.ndarray | None]:
        """Check the gradients of rounds ``rounds``; return each one's bytes and, when the compiled
        path applies them, their values (n, R, e)."""
        awaiting = self.awaiting
        if not set(rounds) <= set(awaiting) or rounds != sorted(set(rounds)):
            raise ProtocolError(f"client {self.index}: gradients for rounds {rounds}, but it waits for "
                                f"rounds {awaiting}"[:300])
        shape = (self.client.window, self.client.model.n_out)
        if (self.kernel is not None and batched(len(self.pending))
                and all(self.acts[t][-1].shape == shape for t in awaiting)):
            values = unpack(parts, Gradient, np.array(rounds, np.int64), self.index, shape)
            if values is not None:
                return dict(zip(rounds, parts, strict=True)), values
        for t, data in zip(rounds, parts, strict=True):
            want = self.acts[t][-1].shape
            grad = self._decode(data, Gradient, t, want)
            if grad.values.shape != want:
                raise ProtocolError(f"client {self.index}: gradient for round {t} has shape "
                                    f"{grad.values.shape}, its embedding had {want}")
        return dict(zip(rounds, parts, strict=True)), None

    def _deliver(self, grads: dict[int, bytes], values: np.ndarray | None) -> None:
        """Apply the last batch's gradients and skips in round order (an activated event whose
        gradient was lost with a failed request is a skip too)."""
        for t in grads:
            self.received(grads[t])
        if values is not None:  # in one compiled call (fedstream.ovfl.party_kernels)
            slot = {t: s for s, t in enumerate(grads)}
            order = np.array([slot[t] if active and t in slot else -1 for t, active in self.pending],
                             np.int64)
            self.kernel.learn(order, values, self._stacked(list(grads)))
        for t, active in self.pending:
            acts = self.acts.pop(t, None)
            if values is not None:
                continue
            if not active or t not in grads:
                self.client.skip()
            else:  # checked already; a topk-grad link's ranking sees it now
                self.client.apply(Ticket(t, acts), self.end.receive(grads[t]))
        self.pending, self._states = [], None

    def _stacked(self, rounds: list[int]) -> list[np.ndarray]:
        """The forward states of ``rounds`` stacked per layer (n, R, width): gathered at once from the
        last batch's arrays where its compiled embed wrote them (they hold every round that awaits a
        gradient: ``pending`` and ``_states`` are set and cleared together; ``self.acts`` are their
        views), else stacked from ``self.acts``."""
        if rounds and self._states is not None:
            t0, states = self._states
            at = np.array(rounds, np.int64) - t0
            return [s[at] for s in states]
        return [np.stack(layer) for layer in zip(*(self.acts[t] for t in rounds))]

    def _decode(self, data: bytes, kind: type, t: int, shape: tuple[int, int] | None = None) -> Message:
        """Decode without changing any state; check type, recipient and round."""
        msg = peek(data, self._probe, Gradient, self._setting, shape)
        if type(msg) is not kind or msg.client != self.index or msg.round != t:
            raise ProtocolError(f"client {self.index}: expected a {kind.__name__} for client {self.index}, "
                                f"round {t}, received a {type(msg).__name__} for client {msg.client}, "
                                f"round {msg.round}")
        return msg

    def _send(self, msg: Message) -> bytes:
        return self.sent(self.end.send(msg))  # compressed when the uplink compresses

    def state_dict(self) -> dict[str, np.ndarray]:
        meta = np.array([self.round, self.up, self.down, self.messages], np.int64)
        acts = {f"acts.{t}.{j}": a for t, layers in self.acts.items() for j, a in enumerate(layers)}
        return collect({"client": self.client, "link": self.end}) | acts | {
            "host": meta, "pending": np.array(self.pending, np.int64).reshape(-1, 2)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        restore({"client": self.client, "link": self.end}, state)
        self.round, self.up, self.down, self.messages = (int(v) for v in state["host"])
        self.pending = [(int(t), bool(a)) for t, a in state["pending"]]
        self.acts, self._states = {}, None
        keys = (k for k in state if k.startswith("acts."))  # acts.{round}.{layer}
        for key in sorted(keys, key=lambda k: tuple(map(int, k.split(".")[1:]))):
            self.acts.setdefault(int(key.split(".")[1]), []).append(np.array(state[key]))
        if sorted(self.acts) != self.awaiting:
            raise ProtocolError(f"client {self.index}: saved state holds forward states for rounds "
                                f"{sorted(self.acts)}, expected {self.awaiting}")
