"""The server party of a deployed online VFL run: the simulator's own loop over remote clients.

:class:`NetworkVFL` holds the labels and the top model and runs the engine's loop
(:class:`~fedstream.ovfl.engine.OnlineRun`: chunks, segments, bookkeeping, checkpoints) with
:class:`~fedstream.ovfl.deploy.proxy.RemoteClient` stand-ins over a
:class:`~fedstream.ovfl.deploy.proxy.LinkTransport`. What it adds is the batch: one request per node
for each B = ``network.batch`` rounds, sent when a segment starts one. With B = 1 the run is the
simulator's, bit for bit; the rest (staleness, ``topl``, faults, resume): docs/deploy-protocol.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from fedstream.data import Stream
from fedstream.data.table_party import check_held_categorical, per_party
from fedstream.deploy.host import model_digest
from fedstream.deploy.psi import align_nodes
from fedstream.deploy.records import Link
from fedstream.deploy.remote import check_reach
from fedstream.errors import ConfigError, ProtocolError
from fedstream.ovfl.activation import activation_from_config
from fedstream.ovfl.deploy.parties import build_server, check_deployable, server_decides, server_labels
from fedstream.ovfl.deploy.proxy import LinkTransport, RemoteClient
from fedstream.ovfl.deploy.records import SetupReply
from fedstream.ovfl.engine import CHUNK, Hooks, OnlineRun, feature_blocks, table_rounds
from fedstream.ovfl.party_kernels import PartyArrays, kernels_apply
from fedstream.ovfl.stand_in import NodePadding, PolicyStandIn
from fedstream.transport.compressed import CompressionSpec
from fedstream.transport.messages import Query


class NetworkVFL(OnlineRun):
    """The server's side of one run; ``link`` reaches client nodes 0..M-1."""

    def __init__(self, config: dict, link: Link, *, stream: Stream, record_sizes: bool = False,
                 ahead: bool = True):
        check_deployable(config)
        M = config["vfl.clients"]
        check_reach(link, "vfl.clients", M)
        self.config, self.stream = config, stream
        source = stream.source
        # one table file per party: the server knows neither the clients' widths nor their columns
        self.blocks = None if per_party(config) else feature_blocks(source.n_features, M)
        if per_party(config):
            config["rounds"] = table_rounds(config, source)  # as the simulator: rows x passes at most
            source.place(align_nodes(config, link, source.id_list))  # the ids' private alignment (PSI)
            if source.held is not None and config["activation.name"] == "fixed":
                raise ConfigError('activation.name = "fixed" with clients that lack some ids is simulated '
                                  "only: a node cannot pick k of the holders without knowing who holds what")
        self.ids = getattr(source, "ids", None)  # ServerTable: the digest of its ids (aligned: per client)
        self._held: dict[int, list[str] | None] = {}  # ... and each node's columns of data.categorical
        self.server = build_server(config, source.n_features, source.n_classes)
        self.node_padding = NodePadding(config["network.padding"], M, config["model.embedding"])
        self.server.stand_in = self.node_padding
        self.activation = activation_from_config(config)  # as the simulator builds it (the nodes' own)
        self.decides = server_decides(config)  # topl: the server decides every node's activations
        if self.decides:
            self.server.stand_in = PolicyStandIn(self.node_padding, self.activation)
        self.batch = config["network.batch"]
        self.ahead = ahead  # send a node its next request ahead when the protocol allows
        self.transport = LinkTransport(link, self._query, embedding=config["model.embedding"],
                                       record_sizes=record_sizes, spec=CompressionSpec.from_config(config),
                                       config=config)
        self.clients = [RemoteClient(m, self.transport) for m in range(M)]
        # the server's batches in compiled calls where they apply (not with its own policy, topl)
        use = not self.decides and kernels_apply(config, self.server)
        self.kernel = PartyArrays(self.server) if use else None
        self._bookkeeping(M)  # wall_seconds: playing rounds (setup and finish not included)
        self.setup_seconds = 0.0
        self.reports: list[dict] = []
        self._set_up = False
        self._end = 0  # the round the run plays to
        self._batch: tuple[int, bool] = (0, False)  # the batch being played: (its end, whether it is kept)
        # the current chunk: the policy's activations (topl); whom its rounds activated and whom the
        # server queries in them, as the replies of its batches say, filled up to round ``_filled``
        self._decided = np.zeros((CHUNK, M), bool)
        self._active, self._queried, self._filled = np.zeros((CHUNK, M), bool), np.ones((CHUNK, M), bool), 0

    @property
    def run_token(self) -> str:
        """The run's token (it names the nodes' checkpoints of this run)."""
        return self.transport.run_token

    def _query(self, t: int, m: int) -> Query:
        """The query the server will send client m in round t of the coming batch: the server's own,
        with the label count it will have then."""
        query = self.server.query(t, m)
        return query._replace(rows=min(self.server.labels.count + (t - self.t) + 1, self.server.window))

    def setup(self, clients: set[int] | None = None, *, rejoin: bool = False, resume: bool = False
              ) -> set[int]:
        """Send the config to ``clients`` (default all); keep those whose node holds the block the
        server expects. A rejoining node resumes from its latest state of this run, a resuming one
        from its state of the checkpoint's round; the gradients held for a node that comes back at
        another round are dropped."""
        tr = self.transport

        def accept(m: int, reply) -> int:
            got = SetupReply.read(reply.info, "setup reply")
            if self.blocks is None:
                want = self.ids[m] if isinstance(self.ids, list) else self.ids
                if got.client != m or got.ids != want:
                    raise ProtocolError(f"the node reports client {got.client} with ids {got.ids}, "
                                        f"expected client {m} with the ids the alignment placed ({want})")
                self._held[m] = got.categorical
            else:
                block = self.blocks[m]
                if (got.client, got.block_start, got.block_stop) != (m, block.start, block.stop):
                    raise ProtocolError(f"the node reports client {got.client} with features "
                                        f"{got.block_start}:{got.block_stop}, expected client {m} with "
                                        f"features {block.start}:{block.stop}")
            tr.check_behind(got.round, self.t)
            return got.round

        info = tr.setup_request(rejoin=rejoin or resume, resume=self.t if resume else None)
        rounds = tr.set_up(tr.link.available() if clients is None else clients, self.t, info, accept)
        if len(self._held) == len(self.clients):  # every client's file: data.categorical, as the simulator
            check_held_categorical(self.config, list(self._held.values()))
        for m, node_round in rounds.items():
            # a node back at round t - 1 (its state after its last reply) still waits for the
            # gradients held for it; one further back never asked for them
            dropped = tr.forget(m) if node_round != self.t - 1 else 0
            tr.reconcile(m, self.t, node_round, self.t - 1, rejoin=rejoin, dropped=dropped)
        return set(rounds)

    # -- the engine's loop, over the nodes ---------------------------------------------------------
    def run(self, rounds: int | None = None, *, on_round=None, checkpoint: Path | None = None) -> dict:
        """Play rounds ``self.t .. rounds-1`` and return the summary (:meth:`finish` sends the nodes
        their last gradients). With ``checkpoint``, save there at the first batch boundary past every
        multiple of ``checkpoint.every`` rounds and at the end; the nodes keep their state there too."""
        self._end = self.config["rounds"] if rounds is None else rounds
        return super().run(rounds, on_round=on_round, checkpoint_path=checkpoint,
                           checkpoint_every=self.config["checkpoint.every"])

    def start(self, hooks: Hooks) -> None:
        """Set the nodes up (a resumed run: each back at its own state of the checkpoint's round)."""
        if not self._set_up:
            tic = time.perf_counter()
            self.setup(resume=self.t > 0)
            self.setup_seconds += time.perf_counter() - tic
            self._set_up = True

    def chunk_rows(self, chunk: int) -> tuple[None, np.ndarray]:
        """The chunk's labels: the server holds no features (each node reads its own block)."""
        return None, server_labels(self.stream, chunk * CHUNK, CHUNK)

    def chunk_inputs(self, chunk: int, X: None) -> tuple[list[np.ndarray], np.ndarray]:
        """No features (empty blocks) and the chunk's activations, filled in by :meth:`segment_end`.
        A server-side policy decides the chunk's activations now, as the simulator does."""
        if self.decides:  # among those who hold each round's id (PSI)
            zeros = np.zeros((CHUNK, len(self.clients)), np.float32)
            self._decided = self.activation.mask_among(chunk, zeros, self.chunk_held(chunk))
        self._active[:], self._queried[:], self._filled = False, True, chunk * CHUNK
        return [np.empty((CHUNK, 0), np.float32)] * len(self.clients), self._active

    def chunk_paths(self, mask: np.ndarray) -> tuple[KernelPath | None, np.ndarray]:
        """The server's compiled batches (where they apply) and whom it queries: the live nodes."""
        return (None if self.kernel is None else KernelPath(self)), self._queried

    def segment_end(self, j: int, base: int, stop: int, h: Hooks) -> int:
        """Send the next batch's requests when row j starts one; a segment ends with its batch."""
        if base + j >= self._batch[0]:
            self._begin_batch(h)
        if base + j >= self._filled:  # the batch's rounds in this chunk, as its replies say
            upto = min(self._batch[0], base + CHUNK)
            self._active[j:upto - base] = self.transport.activations(base + j, upto)
            self._queried[j:upto - base] = False if self.decides else self.transport.live()
            self._filled = upto
        return min(super().segment_end(j, base, stop, h), self._batch[0] - base)

    def checkpoint_due(self, h: Hooks) -> bool:
        """At the end of a batch that is kept."""
        return h.checkpoint_path is not None and self.t == self._batch[0] and self._batch[1]

    def _begin_batch(self, hooks: Hooks) -> None:
        """Set up the nodes that came back, then send every node the batch at round ``self.t``."""
        if back := self.transport.link.rejoined():
            self.setup(back, rejoin=True)
        t, end, every, path = self.t, self._end, hooks.checkpoint_every, hooks.checkpoint_path
        n, keep = self._plan(t, end, every, path)
        # the batch after this one, when known now (a policy's next chunk is decided at its start):
        # its request may go ahead to a node this one leaves passive, the very request it gets otherwise
        after = None
        if self.ahead and t + n < end and not (self.decides and (t + n) % CHUNK == 0):
            n1, keep1 = self._plan(t + n, end, every, path)
            after = (n1, keep1, self.decide(t + n, n1))
        self.transport.begin_batch(t, n, keep=keep, active=self.decide(t, n), after=after)
        if self.decides:  # the policy pads whom it leaves out; the node padding, a node that is down
            self.server.stand_in.down = ~self.transport.live()
        self._batch = (t + n, keep)

    def _plan(self, t: int, end: int, every: int, path: Path | None) -> tuple[int, bool]:
        """The batch at round t: its events (``network.batch``, fewer at the end of the run and, with a
        server-side policy, of the chunk) and whether the server checkpoints after it (``keep``)."""
        n = min(self.batch, end - t)
        if self.decides:
            n = min(n, CHUNK - t % CHUNK)
        return n, path is not None and (t + n == end or bool(every and (t + n) // every > t // every))

    def decide(self, t0: int, n: int) -> np.ndarray | None:
        """The server's activations (n, clients) of rounds t0..t0+n-1, or None when each node decides."""
        return self._decided[t0 % CHUNK:t0 % CHUNK + n] if self.decides else None

    # -- checkpoints (the frame: OnlineRun.save / load) -------------------------------------------
    def _parts(self) -> dict[str, object]:
        parts: dict[str, object] = {"server": self.server, "ledger": self.transport.ledger,
                                    "metrics": self.metrics}
        if self.decides:  # topl: its estimate, exploration buffer and padding
            parts["activation"] = self.activation
        if not self.transport.ends.spec.is_none:  # the server's ends of the links: caches, quantiser tables
            parts["codecs"] = self.transport.ends
        return parts

    def saved(self) -> tuple[dict[str, np.ndarray], dict]:
        """The server's state at a batch boundary besides its parties': the node padding, the events
        each node missed, the gradients held for the nodes, the session and the times."""
        tr = self.transport
        arrays = tr.state() | {"missed": tr.missed, "padding.value": self.node_padding.padding.value,
                               "padding.seen": self.node_padding.padding.seen}
        return arrays, tr.session_state() | {"setup_seconds": self.setup_seconds, "wire_bytes": tr.wire_bytes}

    def restored(self, state: dict[str, np.ndarray], meta: dict) -> None:
        """Take back :meth:`saved`'s part; the run then sets the nodes up with ``resume``."""
        tr = self.transport
        tr.missed[:] = state["missed"]
        self.node_padding.padding.value[...] = state["padding.value"]
        self.node_padding.padding.seen[...] = state["padding.seen"]
        tr.load_state(state)
        tr.load_session_state(meta)
        tr.wire_bytes, self.setup_seconds = meta["wire_bytes"], float(meta["setup_seconds"])
        self._batch = (0, False)
        self._set_up = False

    def finish(self, *, models: bool = False) -> list[dict]:
        """Deliver the last gradients and collect each node's report (its model too if ``models``);
        each node's byte counts must equal the server's."""
        self.reports = self.transport.finish(self.t - 1, models=models)
        return self.reports

    # -- as deploy.serve runs it ------------------------------------------------------------------
    def where(self) -> str:
        return f"at round {self.t}"

    def play(self, checkpoint: Path | None, *, audit: bool) -> dict:
        """Play the remaining rounds, deliver the last gradients, collect the nodes' reports (with
        ``audit`` their models too); the summary with the digest of the server's model."""
        self.run(checkpoint=checkpoint)
        self.finish(models=audit)
        return self.summary() | {"server_digest": model_digest(self.server.model.parameters())}

    def audit(self) -> dict:
        """Every party's model (``models``) and each message's size (``message_sizes``)."""
        arrays = {f"server.{i}": p for i, p in enumerate(self.server.model.parameters())}
        for r in self.reports:
            arrays |= {f"client{r['client']}.{i}": p for i, p in enumerate(r["params"])}
        return {"models": arrays, "message_sizes": self.transport.sizes}

    def summary(self) -> dict:
        tr, source = self.transport, self.stream.source
        return (
            super().summary()
            | {
                "setup_seconds": self.setup_seconds,
                "missed_events": tr.missed.tolist(),  # per client: events played with its padding
                "network_batch": self.batch,
                "wire_part_bytes": tr.wire_bytes,  # payload plus the unused queries of activated events
            }
            | tr.record()
            | {"clients": [{k: v for k, v in r.items() if k != "params"} for r in self.reports]}
            | ({} if self.blocks is not None else {"classes": list(source.classes)})  # a table's
            | ({"alignment": source.alignment.summary()}  # PSI, apart from the training's bytes
               if getattr(source, "alignment", None) is not None else {})
        )


class KernelPath:
    """The server's step for a segment of a batch's rounds in one compiled call
    (:meth:`fedstream.ovfl.party_kernels.PartyArrays.serve`), when every node is live and each reply
    was checked at once; the transport counts and holds their messages in ``play_round``'s order."""

    def __init__(self, net: NetworkVFL):
        self.net = net

    def ready(self, rounds: int) -> bool:
        net = self.net
        return net.kernel.ready(rounds) and net.transport.at_once(net.t, net.t + rounds)

    def play(self, X: None, y: np.ndarray, mask: np.ndarray, j0: int, j1: int) -> tuple[np.ndarray, int]:
        net, t0, y = self.net, self.net.t, y[j0:j1]
        H = net.transport.stacked(t0, t0 + len(y))
        tic = net.clock.start()
        pred, GH = net.kernel.serve(H, y)
        net.clock.add_server(tic)
        net.transport.learned(t0, GH, mask[j0:j1])
        if net.node_padding.learns:  # the server's input row of each round, every client real
            for j in range(len(y)):
                net.node_padding.received(int(y[j]), H[j, -1], np.ones(len(net.clients), bool))
        return pred, -1
