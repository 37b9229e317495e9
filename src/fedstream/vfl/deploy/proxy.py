"""The server's side of a deployed batch VFL run: the client nodes as a
:class:`~fedstream.vfl.protocol.Cohort` over a link, which the simulator's step loop
(:func:`fedstream.vfl.trainer.play_epochs`) drives unchanged. What crosses the wire, the checks on
each reply, faults, rejoins and resume: docs/deploy-protocol.md, "Batch VFL"; the requests and
replies: :mod:`fedstream.vfl.deploy.records`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import asdict

import numpy as np

from fedstream.deploy.host import FinishReply
from fedstream.deploy.reconcile import recent_faults
from fedstream.deploy.records import FINISH, ROUND, Envelope, Link
from fedstream.deploy.remote import RemoteNodes
from fedstream.errors import ProtocolError
from fedstream.transport.compressed import ServerEnds
from fedstream.transport.messages import Embedding, Gradient
from fedstream.vfl.deploy.records import (
    EVALUATION,
    FinishRequest,
    SelectRequest,
    SetupReply,
    TestRequest,
    TrainRequest,
    boundary_of,
    check_message,
)
from fedstream.vfl.deploy.vfps import DISTANCES, QUERIES, SELECT
from fedstream.vfl.deploy.vfps import decode as decode_vfps
from fedstream.vfl.deploy.vfps import encode as encode_vfps
from fedstream.vfl.protocol import Batch
from fedstream.vfl.settings import BatchVFLSettings

FINISH_FIELDS = ("client", "up", "down", "eval_up", "select_up", "select_down", "digest")  # a node's report
SAVED = ("t", "missed", "eval_up", "selection_bytes")  # what the cohort's checkpoint holds as it is (JSON)


class RemoteCohort(RemoteNodes):
    """Client nodes 0..M-1 of a batch VFL run behind ``link``. The server keeps its end of every
    compressed link (``ends``: the embedding cache, the quantiser's table), each node the other; the
    gradient of a node's step rides with its next request (``outbox``), so a step is one round trip.
    The trainer sets ``ledger`` aside for a fresh one while it evaluates."""

    unit = "step"
    payload = "embedding(s)"  # what _reply (Session) calls the parts of a reply

    def __init__(self, link: Link, config: dict, settings: BatchVFLSettings, *, run_token: str | None = None):
        super().__init__(link, config, clients=("vfl.clients", settings.clients), run_token=run_token)
        self.settings = settings
        M, spec = settings.clients, settings.compression
        self.ends = ServerEnds(M, spec)  # with the probe that checks an embedding before its end sees it
        self.eval_up = [0] * M  # per node: the bytes of its evaluation embeddings (not in ``ledger``)
        # client -> (step, its encoded gradient) riding with its next request
        self.outbox: dict[int, tuple[int, bytes]] = {}
        self.expected: dict[int, dict] = {}  # client -> the strip shape and rows its node must report
        self.at: dict[int, int] = {}  # client -> the last training step its node answered validly
        self.t = 0  # the next training step
        # per client: training steps it was selected for and padded (down, faulty, rejoining)
        self.missed = [0] * M
        self.keeping = False  # the server checkpoints: epoch ends (and VF-PS selections) are node boundaries
        self.epoch: int | None = None  # the epoch being played (the driver's loop sets it): its boundaries
        self.models: dict[int, dict[str, np.ndarray]] = {}  # the nodes' models, when asked for at finish
        self.selection_bytes = [{"up": 0, "down": 0} for _ in range(M)]  # VF-PS messages, apart from training

    # -- VF-PS ---------------------------------------------------------------------------------------
    def distances(self, epoch: int, rows: np.ndarray | None, queries: np.ndarray) -> np.ndarray:
        """(M, Q, n) every node's local squared distances from each query to every available training
        row (``rows``: those rows, None for all) for the VF-PS selection of ``epoch``; a node whose
        reply fails a check is a fault, and ends the run (VF-PS needs every client's distances)."""
        M, Q = self.settings.clients, len(queries)
        n = self.nodes[0]["n_train"] if rows is None else len(rows)
        keep = self.keeping  # the node keeps its state after the selection that opens the epoch
        info = SelectRequest(split=SELECT, queries=Q, rows=None if rows is None else [int(r) for r in rows],
                             keep=keep or None, boundary=boundary_of(epoch, SELECT) if keep else None).info()
        ids = np.asarray(queries, dtype="<u4")[None, :]
        requests = {}
        for m in self._targets(epoch, None, SELECT):
            part = encode_vfps(QUERIES, epoch, m, ids)
            self.selection_bytes[m]["down"] += len(part)
            requests[m] = Envelope(ROUND, epoch, [part], info.copy())  # a due gradient stays in the outbox

        def check(m: int, reply: Envelope) -> tuple[bytes, np.ndarray]:
            data = reply.parts[0]
            return data, decode_vfps(data, kind=DISTANCES, round=epoch, client=m, shape=(Q, n))

        out = np.empty((M, Q, n))
        got = self.answers(requests, epoch, check, request=SELECT, kind=ROUND, parts=1,
                           payload="distance message(s)")
        for m, (data, values) in got.items():
            out[m] = values
            self.selection_bytes[m]["up"] += len(data)
        missing = sorted(set(range(M)) - set(got))
        if missing:
            raise ProtocolError(
                f"epoch {epoch}: VF-PS needs every client's local distances; clients {missing} sent "
                f"none that passed the checks {recent_faults(self)}"
            )
        return out

    def _targets(self, t: int, selected: Collection[int] | None, request: str) -> list[int]:
        """The selected clients whose node is set up and reachable now (faults for the others), after
        setting up again (``rejoin``) the nodes the link reports back since the last request."""
        if self.expected and (back := self.link.rejoined()):
            self.setup(self.expected, back, rejoin=True)
        return self.reachable([m for m in self.ready if selected is None or m in selected], t, request)

    def _requests(self, kind: str, t: int, info: dict, selected: Collection[int] | None, request: str
                  ) -> dict[int, Envelope]:
        """The selected nodes' ``kind`` requests with ``info`` (:meth:`_targets`), each with the
        gradient due to it (it rides along)."""
        requests = {}
        for m in self._targets(t, selected, request):
            held = self.outbox.pop(m, None)
            requests[m] = Envelope(kind, t, [] if held is None else [held[1]], info.copy())
        return requests

    # -- setup, rejoin, resume ----------------------------------------------------------------------
    def setup(
        self,
        expected: dict[int, dict],
        clients: Collection[int] | None = None,
        *,
        rejoin: bool = False,
        resume: int | None = None,
    ) -> None:
        """Send ``clients`` (default: every reachable node) the config; check each reports ``expected[m]``
        (strip shape and rows) and a position before the next step. ``rejoin``: the node reloads its
        latest state of this run; ``resume = B``: its state kept at boundary B (the server restarted
        from its checkpoint there). A fresh or resumed run needs every node; a rejoin does not."""
        M = self.settings.clients
        self.expected = expected
        info = self.setup_request(rejoin=True if rejoin or resume is not None else None, resume=resume)
        targets = self.link.available() if clients is None else clients

        def accept(m: int, reply: Envelope) -> tuple[dict, int, int]:
            r = SetupReply.read(reply.info, "setup reply", t=self.t)
            want = {"client": m} | expected[m]
            got = {k: v for k, v in asdict(r).items() if k in want}  # one file per party: ids, no shape
            if got != want:
                raise ProtocolError(
                    f"the node reports {got}, expected {want}: it does not hold this run's data set or "
                    "settings"
                )
            columns = {} if r.categorical is None else {"categorical": r.categorical}
            return got | columns, r.step, r.pending

        accepted = self.set_up(targets, self.t, info, accept, fresh=not rejoin, parts=0)
        for m, (got, step, pending) in accepted.items():
            self.nodes[m] = got
            self._reconcile(m, step, pending, rejoin)
        if not rejoin:  # a (re)started run: only the nodes that pass now take part, and it needs them all
            self.require_all(self.ready, M, f"a batch VFL run needs all vfl.clients = {M}")

    def _reconcile(self, m: int, step: int, pending: int, rejoin: bool) -> None:
        """Match what the server holds for client m to the state its node came back with: the held
        gradient goes out only if it is for the node's ``pending`` step, else it is dropped; a rejoin,
        a dropped gradient or a node not where the server expects it is recorded in ``rejoins``."""
        held = self.outbox.get(m)
        dropped = 0
        if held is not None and held[0] != pending:
            del self.outbox[m]
            dropped = 1
        self.reconcile(m, self.t, step, self.at.get(m, -1), rejoin=rejoin, dropped=dropped)
        self.at[m] = step

    # -- the Cohort interface ----------------------------------------------------------------------
    def embeddings(self, batch: Batch, selected: Collection[int] | None) -> list[Embedding | None]:
        t, out = batch.step, [None] * self.settings.clients
        info = TrainRequest(split="train", rows=[int(r) for r in batch.rows]).info()

        def check(m: int, reply: Envelope) -> bytes:
            self.check_embedding(m, reply.parts[0], t, len(batch))
            return reply.parts[0]

        requests = self._requests(ROUND, t, info, selected, "train")
        for m, data in self.answers(requests, t, check, request="train", kind=ROUND, parts=1).items():
            out[m] = self._accept(m, data, batch.samples)
            self.at[m] = t
        self.t = t + 1
        for m in range(self.settings.clients):
            if out[m] is None and (selected is None or m in selected):
                self.missed[m] += 1
        if all(e is None for e in out):
            raise ProtocolError(f"step {t}: no client node answered validly {recent_faults(self)}")
        return out

    def gradients(self, gradients: Sequence[Gradient]) -> None:
        for grad in gradients:
            m = grad.client
            data = self.ends[m].send(grad)
            self.ledger.add(m, "down", len(data))
            self.outbox[m] = (grad.round, data)

    def inferences(
        self, batches: Sequence[Batch], selected: Collection[int] | None
    ) -> Iterator[list[Embedding | None]]:
        if not batches:
            return
        t = batches[0].step
        info = TestRequest(split="test", rows=[int(r) for b in batches for r in b.rows],
                           sizes=[len(b) for b in batches], steps=[b.step for b in batches],
                           keep=self.keeping or None,
                           boundary=boundary_of(self.epoch, EVALUATION) if self.keeping else None).info()

        def check(m: int, reply: Envelope) -> list[bytes]:
            for b, data in zip(batches, reply.parts):  # every batch valid before any is used
                self.check_embedding(m, data, b.step, len(b))
            return reply.parts

        requests = self._requests(ROUND, t, info, selected, "evaluation")
        got = self.answers(requests, t, check, request="evaluation", kind=ROUND, parts=len(batches))
        for j, b in enumerate(batches):
            yield [self._accept(m, got[m][j], b.samples, evaluation=True) if m in got else None
                   for m in range(self.settings.clients)]

    # -- replies -----------------------------------------------------------------------------------
    def check_embedding(self, m: int, data: bytes, t: int, rows: int) -> None:
        """Check client m's embedding of step t (shape (rows, embedding)) without touching m's end of
        the link (:func:`~fedstream.vfl.deploy.records.check_message`); raise ProtocolError."""
        shape = (rows, self.settings.embedding)
        check_message(data, self.ends.probe, Embedding, self.ends.setting, shape, client=m, step=t,
                      what=f"client {m}'s embedding")

    def _accept(self, m: int, data: bytes, samples: np.ndarray | None, *,
                evaluation: bool = False) -> Embedding:
        """Decode a checked embedding with the server's end of m's link (its cache) and count it."""
        self.ledger.add(m, "up", len(data))
        if evaluation:
            self.eval_up[m] += len(data)
        return self.ends[m].receive(data, samples)

    # -- the end ---------------------------------------------------------------------------------------
    def finish(self, t: int, *, models: bool = False) -> None:
        """Deliver the last gradients; collect each node's byte counts (and with ``models`` its model)."""

        def report(m: int, reply: Envelope, got: FinishReply) -> dict:
            mine = {"up": self.ledger.up[m], "down": self.ledger.down[m], "eval_up": self.eval_up[m]}
            theirs = {"up": got.up, "down": got.down, "eval_up": got.eval_up}
            theirs_select = {"up": got.select_up, "down": got.select_down}
            excused = self.troubled(m)  # a fault or rejoin: the two ends differ by what was lost
            self.cross_check(m, t, theirs, mine, excused=excused)
            self.cross_check(m, t, theirs_select, self.selection_bytes[m], "VF-PS bytes ", excused=excused)
            if models:
                self.models[m] = dict(reply.arrays)
            return {"client": m, **theirs, "select_up": theirs_select["up"],
                    "select_down": theirs_select["down"], "digest": got.digest, "server_counted": mine}

        requests = self._requests(FINISH, t, FinishRequest(models=models).info(), None, FINISH)
        self.finish_reports(requests, t, FINISH_FIELDS, report, parts=0)

    # -- checkpoints -----------------------------------------------------------------------------------
    def state_dict(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The server's side of every link at an epoch end, as (JSON-able values, named arrays): the
        server's ends, the ledger, the gradients held for the nodes, where each node stands, and the
        record (faults, rejoins, missed steps, exchanges, evaluation and VF-PS bytes)."""
        arrays = {f"end{k}": np.asarray(v) for k, v in self.ends.state_dict().items()}
        arrays |= {f"ledger.{k}": v for k, v in self.ledger.state_dict().items()}
        arrays |= {
            f"outbox.{m}": np.frombuffer(data, np.uint8).copy() for m, (_, data) in self.outbox.items()
        }
        meta = {k: getattr(self, k) for k in SAVED} | {
            "outbox_steps": {str(m): t for m, (t, _) in self.outbox.items()},
            "position": {str(m): t for m, t in self.at.items()},
        } | self.session_state()  # the run's token, faults, rejoins and requests sent
        return meta, arrays

    def load_state_dict(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` saved; the nodes are then set up again with ``resume``
        (which makes ``nodes`` and ``ready`` anew)."""
        self.ends.load_state_dict({k[len("end"):]: v for k, v in arrays.items() if k.startswith("end")})
        self.ledger.load_state_dict(
            {k[len("ledger.") :]: v for k, v in arrays.items() if k.startswith("ledger.")}
        )
        self.outbox = {
            int(m): (int(t), arrays[f"outbox.{m}"].tobytes()) for m, t in meta["outbox_steps"].items()
        }
        self.at = {int(m): int(t) for m, t in meta["position"].items()}
        for k in SAVED:
            setattr(self, k, meta[k])
        self.load_session_state(meta)
