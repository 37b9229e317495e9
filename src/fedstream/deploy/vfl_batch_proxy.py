"""The server's side of a deployed batch VFL run: the clients as a :class:`~fedstream.vfl.batch.protocol.Cohort` over a link.

:class:`RemoteCohort` is what the simulator's step loop (:func:`fedstream.vfl.batch.trainer.play_epochs`,
unchanged) talks to when the client parties live on their own nodes
(:mod:`fedstream.deploy.vfl_batch_host`). The server keeps its end of every compressed link
(:class:`~fedstream.transport.compressed.ServerEndpoint`: the uplink decoder with the per-sample
embedding cache, the downlink encoder with the quantiser's mu/sigma table), the node the other.
One request per node per training step, all nodes at once:

============  ==============================================  =====================================
request       carries (server -> node)                        reply (node -> server)
============  ==============================================  =====================================
setup         the run's config (JSON) and token                its strip's shape, train/test rows
train step s  the gradient of the node's step s - 1 (encoded  its embedding of step s (encoded,
              by the downlink codec; none at the first step); compressed by the uplink codec)
              ``rows``: the step's row ids
evaluation    the gradient still due; ``rows``, ``sizes``,     one embedding per test batch
              ``steps``: the test batches
finish        the gradient still due; ``models`` (audit)       the node's byte counts, model digest
VF-PS select  the query ids (a 16 + 4 Q-byte message);         its local squared distances, Q x n
              ``queries``: Q (``rows``: available rows)        (16 + 4 Q n bytes, float32)
============  ==============================================  =====================================

The gradient of step s rides with the request of step s + 1 (or the evaluation or finish that
comes next), so a step costs one round trip; the node applies it before it embeds anything else:
the sequential algorithm, unchanged. The ledger counts each embedding when accepted and each
gradient when encoded, exactly as the simulator's transport counts them; row ids and the other
``info`` fields are control data, not counted (in the simulator the server's end knows the rows
without their travelling).

Every reply is validated before any of it is used: kind and step, the number of parts, and each
embedding decoded first by a stateless decoder (header, codec, length; for this client, this
step, of shape (rows, embedding), finite values) and only then by the server's end of the link,
whose cache it updates. A node whose reply fails a check, whose ClientApp failed or which did not
answer in time is logged and recorded (``faults``); the server pads its embedding for that step
(``selection.padding``; zeros without selection) and sends it no gradient, so the node drops that
step. A step with no valid embedding at all ends the run with a :class:`ProtocolError`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace

import numpy as np

from fedstream.deploy.link import FINISH, ROUND, SETUP, Envelope, Failure, Link
from fedstream.deploy.remote import RemoteNodes
from fedstream.deploy.vfl_batch_vfps import DISTANCES, QUERIES, SELECT
from fedstream.deploy.vfl_batch_vfps import decode as decode_vfps
from fedstream.deploy.vfl_batch_vfps import encode as encode_vfps
from fedstream.errors import FedstreamError, ProtocolError
from fedstream.transport.compressed import ServerEndpoint
from fedstream.transport.ledger import ByteLedger
from fedstream.vfl.batch.protocol import Batch
from fedstream.vfl.batch.settings import BatchVFLSettings
from fedstream.vfl.messages import Embedding, Gradient


class RemoteCohort(RemoteNodes):
    """Client nodes 0..M-1 of a batch VFL run behind ``link`` (see the module doc)."""

    unit = "step"

    def __init__(self, link: Link, config: dict, settings: BatchVFLSettings, *, run_token: str):
        super().__init__(link)
        self.config, self.settings, self.run_token = config, settings, run_token
        M, spec = settings.clients, settings.compression
        if link.n_clients != M:
            raise ProtocolError(f"the link reaches {link.n_clients} client nodes, vfl.clients = {M}")
        self.ends = [ServerEndpoint(m, spec) for m in range(M)]
        self.probes = [ServerEndpoint(m, replace(spec, cache=False)) for m in range(M)]  # stateless decoders
        self.ledger = ByteLedger(M)  # the trainer sets it aside for a fresh one while it evaluates
        self.counted = [{"up": 0, "down": 0, "eval_up": 0} for _ in range(M)]  # per node, whatever the ledger
        self.outbox: dict[int, bytes] = {}  # client -> encoded gradient riding with its next request
        self.nodes: dict[int, dict] = {}  # client -> what its node reported at setup
        self.reports: list[dict] = []  # the nodes' byte counts at the end
        self.models: dict[int, dict[str, np.ndarray]] = {}  # the nodes' models, when asked for at finish
        self.selection_bytes = [{"up": 0, "down": 0} for _ in range(M)]  # VF-PS messages, apart from training

    # -- VF-PS ---------------------------------------------------------------------------------------
    def distances(self, epoch: int, rows: np.ndarray | None, queries: np.ndarray) -> np.ndarray:
        """(M, Q, n) every node's local squared distances from each query to every available training
        row (``rows``: those rows, None for all), for the VF-PS selection of ``epoch``
        (:mod:`fedstream.deploy.vfl_batch_vfps`). Each reply is checked (sender, epoch, kind, shape
        Q x n, finite, non-negative) before use; VF-PS needs every client's distances, so a node whose
        reply fails is recorded (``faults``) and the selection ends the run with a ProtocolError."""
        M, n, Q = self.settings.clients, (self.nodes[0]["n_train"] if rows is None else len(rows)), len(queries)
        info = {"split": SELECT, "queries": Q} | ({} if rows is None else {"rows": [int(r) for r in rows]})
        ids = np.asarray(queries, dtype="<u4")[None, :]
        requests = {}
        for m in self._targets(epoch, None, SELECT):
            part = encode_vfps(QUERIES, epoch, m, ids)
            self.selection_bytes[m]["down"] += len(part)
            requests[m] = Envelope(ROUND, epoch, [part], dict(info))  # a due gradient stays in the outbox
        out, got = np.empty((M, Q, n)), set()
        for m, reply in self._exchange(requests).items():
            try:
                parts = self._reply(reply, ROUND, epoch, None).parts
                if len(parts) != 1:
                    raise ProtocolError(f"expected one distance message, received {len(parts)} part(s)")
                data = parts[0]
                out[m] = decode_vfps(data, kind=DISTANCES, round=epoch, client=m, shape=(Q, n))
            except FedstreamError as exc:
                self.fault(m, epoch, SELECT, str(exc))
                continue
            self.selection_bytes[m]["up"] += len(data)
            got.add(m)
        missing = sorted(set(range(M)) - got)
        if missing:
            raise ProtocolError(f"epoch {epoch}: VF-PS needs every client's local distances; clients {missing} sent "
                                f"none that passed the checks (faults: {[f['reason'] for f in self.faults[-3:]]})")
        return out

    def _reply(self, reply: Envelope | Failure, kind: str, t: int, parts: int | None) -> Envelope:
        if isinstance(reply, Failure):
            raise ProtocolError(reply.reason)
        if reply.kind != kind or reply.round != t:
            raise ProtocolError(f"expected a {kind!r} reply for step {t}, received a {reply.kind!r} reply for "
                                f"step {reply.round}")
        if parts is not None and len(reply.parts) != parts:
            raise ProtocolError(f"expected {parts} embedding(s), received {len(reply.parts)} part(s)")
        return reply

    def _targets(self, t: int, selected: Collection[int] | None, request: str) -> list[int]:
        """The selected clients whose node is set up and reachable now (faults for the others)."""
        wanted = [m for m in sorted(self.nodes) if selected is None or m in selected]
        reachable = self.link.available()
        for m in wanted:
            if m not in reachable:
                self.fault(m, t, request, "not sent: the node left, or is still busy with a request that timed out")
        return [m for m in wanted if m in reachable]

    def _request(self, m: int, kind: str, t: int, info: dict) -> Envelope:
        """Client m's request, with the gradient due to it (it rides along)."""
        grad = self.outbox.pop(m, None)
        return Envelope(kind, t, [] if grad is None else [grad], info)

    # -- setup -----------------------------------------------------------------------------------
    def setup(self, expected: dict[int, dict]) -> None:
        """Send every node the config; check each reports ``expected[m]`` (strip shape and rows)."""
        import json

        M = self.settings.clients
        info = {"config": json.dumps(self.config), "run": self.run_token}
        replies = self._exchange({m: Envelope(SETUP, 0, [], dict(info)) for m in sorted(self.link.available())})
        for m, reply in replies.items():
            try:
                reply = self._reply(reply, SETUP, 0, 0)
                got = {k: reply.info.get(k) for k in ("client", "shape", "n_train", "n_test")}
                want = {"client": m} | expected[m]
                if got != want:
                    raise ProtocolError(f"the node reports {got}, expected {want}: it does not hold this run's "
                                        "data set or settings")
                self.nodes[m] = got
            except FedstreamError as exc:
                self.fault(m, 0, SETUP, str(exc))
        self.require_all(self.nodes, M, f"a batch VFL run needs all vfl.clients = {M}")

    # -- the Cohort interface ----------------------------------------------------------------------
    def embeddings(self, batch: Batch, selected: Collection[int] | None) -> list[Embedding | None]:
        t, out = batch.step, [None] * self.settings.clients
        info = {"split": "train", "rows": [int(r) for r in batch.rows]}
        requests = {m: self._request(m, ROUND, t, dict(info)) for m in self._targets(t, selected, "train")}
        for m, reply in self._exchange(requests).items():
            try:
                data = self._reply(reply, ROUND, t, 1).parts[0]
                self._check(m, data, t, len(batch))
            except FedstreamError as exc:
                self.fault(m, t, "train", str(exc))
                continue
            out[m] = self._accept(m, data, batch.samples, "up")
        if all(e is None for e in out):
            raise ProtocolError(f"step {t}: no client node answered validly (faults: "
                                f"{[f['reason'] for f in self.faults[-3:]]})")
        return out

    def gradients(self, gradients: Sequence[Gradient]) -> None:
        for grad in gradients:
            m = grad.client
            data = self.ends[m].send(grad)
            self.ledger.add(m, "down", len(data))
            self.counted[m]["down"] += len(data)
            self.outbox[m] = data

    def inferences(self, batches: Sequence[Batch], selected: Collection[int] | None) -> Iterator[list[Embedding | None]]:
        if not batches:
            return
        t = batches[0].step
        info = {"split": "test", "rows": [int(r) for b in batches for r in b.rows], "sizes": [len(b) for b in batches],
                "steps": [b.step for b in batches]}
        requests = {m: self._request(m, ROUND, t, dict(info)) for m in self._targets(t, selected, "evaluation")}
        got: dict[int, list[bytes]] = {}
        for m, reply in self._exchange(requests).items():
            try:
                parts = self._reply(reply, ROUND, t, len(batches)).parts
                for b, data in zip(batches, parts):  # every batch valid before any is used
                    self._check(m, data, b.step, len(b))
            except FedstreamError as exc:
                self.fault(m, t, "evaluation", str(exc))
                continue
            got[m] = parts
        for j, b in enumerate(batches):
            yield [self._accept(m, got[m][j], b.samples, "eval_up") if m in got else None
                   for m in range(self.settings.clients)]

    # -- replies -----------------------------------------------------------------------------------
    def _check(self, m: int, data: bytes, t: int, rows: int) -> None:
        """Client m's embedding of step t, decoded by a stateless decoder and checked; raise ProtocolError."""
        try:
            msg = self.probes[m].receive(data)
        except ProtocolError:  # header, codec, length, sender: already says what is wrong
            raise
        except Exception as exc:  # noqa: BLE001 - untrusted bytes: any decoding failure is the sender's
            raise ProtocolError(f"undecodable embedding: {exc}"[:500]) from None
        shape = (rows, self.settings.embedding)
        if type(msg) is not Embedding or msg.round != t or tuple(msg.values.shape) != shape:
            raise ProtocolError(f"expected client {m}'s embedding of step {t} of shape {shape}, received a "
                                f"{type(msg).__name__} of step {msg.round}, shape {tuple(msg.values.shape)}")
        if not np.isfinite(msg.values).all():
            raise ProtocolError(f"client {m}'s embedding of step {t} holds NaN or inf")

    def _accept(self, m: int, data: bytes, samples: np.ndarray | None, direction: str) -> Embedding:
        """Decode a checked embedding with the server's end of m's link (its cache) and count it."""
        self.ledger.add(m, "up", len(data))
        self.counted[m][direction] += len(data)
        return self.ends[m].receive(data, samples)

    # -- the end ---------------------------------------------------------------------------------------
    def finish(self, t: int, *, models: bool = False) -> None:
        """Deliver the last gradients; collect each node's byte counts (and with ``models`` its model)."""
        requests = {m: self._request(m, FINISH, t, {"models": models}) for m in self._targets(t, None, FINISH)}
        self.reports = []
        for m, reply in sorted(self._exchange(requests).items()):
            try:
                reply = self._reply(reply, FINISH, t, 0)
            except FedstreamError as exc:
                self.fault(m, t, FINISH, str(exc))
                continue
            theirs = {k: reply.info.get(k) for k in ("up", "down", "eval_up")}
            if theirs != self.counted[m] and not any(f["client"] == m for f in self.faults):
                self.fault(m, t, FINISH, f"the node counted {theirs}, the server {self.counted[m]}")
            theirs_select = {"up": reply.info.get("select_up"), "down": reply.info.get("select_down")}
            if theirs_select != self.selection_bytes[m] and not any(f["client"] == m for f in self.faults):
                self.fault(m, t, FINISH, f"the node counted VF-PS bytes {theirs_select}, the server "
                                         f"{self.selection_bytes[m]}")
            self.reports.append({"client": m, **theirs, "select_up": theirs_select["up"],
                                 "select_down": theirs_select["down"], "digest": reply.info.get("digest"),
                                 "server_counted": dict(self.counted[m])})
            if models:
                self.models[m] = dict(reply.arrays)
