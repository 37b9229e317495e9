"""The server party of a deployed streaming CHFL run (``chfl.mode = "stream"``).

:class:`NetworkStream` plays the simulator's stream (:mod:`fedstream.chfl.stream`, ``_Stream.tick``)
over the deployment session (:class:`~fedstream.deploy.session.Session`) with client nodes
(:mod:`fedstream.chfl.deploy.stream_node`). It holds no data: the nodes report the data set's sizes
and the server computes the run's layout from them (ticks, join ticks) and draws the initial global
column first from the run's generator, as the simulator does.

The stream is cut into *segments* at every synchronisation (each ``sync_every`` ticks), at every
join tick and at the end. One request per active node and segment carries the global column θ
when the node needs it (it joins now, a synchronisation happened since its last request, or it
came back) and asks, at a synchronisation, for its common column: one round trip per FedAvg
round. The ledger counts the encoded ModelUpdates as the simulator's ``ModelTransport``: θ down
when sent (the broadcast after the last synchronisation goes with the finish request), θ_k up
when accepted; FedAvg averages the accepted updates in client order. Without faults the result
(prequential accuracy per client and tick, curve, late joiner, bytes) and the final global column
are the simulator's.

Every reply is checked (kind, the segment's first tick, one count in 0..batch per tick, the update
decoded, from this client, for the server's round, with the tensors of the global column and the
rows learnt since the node's previous upload, or any whole number of batches from a node that had a
fault or came back: it may have learnt rows the server did not count). A node that fails a segment
is recorded in ``faults`` and its ticks in ``missed_ticks`` (the accuracy counts only the ticks
played); it gets θ again with its next request, and a FedAvg round averages the others (a round
without any valid update keeps θ, ``carried_over`` lists its tick; a second in a row ends the
run). A node that comes back is set up with ``rejoin`` (its latest state) and plays on from the
next segment. Given a checkpoint path (``run(checkpoint=...)``,
``--out``), the server saves its state after every synchronisation before the end, and the nodes
keep theirs of that tick; :meth:`NetworkStream.load` (``--resume``) goes on from it with the same
nodes.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from fedstream.chfl.checkpoint import (
    DEPLOYED,
    CheckpointError,
    RunFolder,
    arrays_to_tensors,
    check_identity,
    ledger_state,
    load_ledger,
    read_checkpoint,
    tensors_to_arrays,
)
from fedstream.chfl.deploy.records import SegmentReply, SegmentRequest, StreamSetupReply, check_update
from fedstream.chfl.deploy.stream_node import stream_config_settings
from fedstream.chfl.fedavg import FedAvgServer
from fedstream.chfl.models import state_arrays
from fedstream.chfl.stream import (
    METRIC_COLUMNS,
    draw_parties,
    prequential_point,
    stream_layout,
    stream_summary,
)
from fedstream.data.chfl_datasets import SPECS
from fedstream.deploy.host import FinishReply
from fedstream.deploy.reconcile import COUNTS, agree, check_client, counts_report, unchanged
from fedstream.deploy.records import FINISH, ROUND, Envelope, Link
from fedstream.deploy.session import Session
from fedstream.errors import FedstreamError, ProtocolError
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.tensors import encode_update
from fedstream.transport.updates import ModelUpdate

_SHARED = ("n_rows", "n_features", "n_common", "n_classes", "n_ticks")


class NetworkStream(Session):
    """The server's side of one deployed streaming CHFL run; ``link`` reaches nodes 0..K-1."""

    position = ("tick",)  # a run's position: the tick a segment starts at

    def __init__(self, link: Link, config: dict):
        super().__init__(link, config)
        self.settings = s = stream_config_settings(config)
        self.method, self.seed = config["chfl.method"], config["seed"]
        if link.n_clients != s.clients:
            raise ProtocolError(f"the link reaches {link.n_clients} client nodes, chfl.clients = {s.clients}")
        self.ledger = ByteLedger(s.clients)
        self.server: FedAvgServer | None = None
        self.nodes: dict[int, dict] = {}
        self.reports: list[dict] = []
        self.saved: dict | None = None  # the checkpoint load() read
        self.loaded: Path | None = None

    def identity(self, n_rows: int | None, n_classes: int | None) -> dict:
        """Which run a checkpoint is of (the simulator's stream identity; the kind tells them apart)."""
        return {"task": "chfl-stream", "settings": asdict(self.settings), "method": self.method,
                "seed": self.seed, "n_rows": n_rows, "n_classes": n_classes}

    def load(self, path: Path) -> None:
        """Resume from the checkpoint ``run(checkpoint=path)`` wrote (another run's or the simulator's
        is refused); :meth:`run` then sets the nodes up with ``resume`` and goes on from there."""
        path = Path(path)
        saved = read_checkpoint(path, kind=DEPLOYED)
        ident = saved["identity"]
        check_identity(path, ident, self.identity(ident.get("n_rows"), ident.get("n_classes")))
        self.saved, self.loaded = saved["state"], path
        self.run_token = self.saved["network"]["run"]

    # -- setup -------------------------------------------------------------------------------------
    def _check_setup(self, m: int, reply: Envelope) -> dict:
        got = StreamSetupReply.read(reply.info, "setup reply")
        check_client(got.client, m)
        return got.info()

    def _setup(self, at: int) -> tuple[list[int], int]:
        s, K = self.settings, self.settings.clients
        info = self.setup_request() if not at else self.setup_request(rejoin=True, resume=at)
        self.nodes = self.set_up(self.link.available(), at, info, self._rejoin_check(at) if at else
                                 self._check_setup)
        self.require_all(self.nodes, K, f"a streaming CHFL run needs all chfl.clients = {K}")
        first = agree(self.nodes, _SHARED)
        if first["n_classes"] != SPECS[s.dataset].n_classes:
            raise ProtocolError(f"the nodes report {first['n_classes']} classes, expected "
                                f"{SPECS[s.dataset].n_classes} for data.name = {s.dataset!r}")
        layout = stream_layout(first["n_rows"], first["n_features"], s, self.seed)
        mine = {"n_common": len(layout.features.common), "n_ticks": layout.n_ticks}
        joins = [self.nodes[m]["join_tick"] for m in range(K)]
        if any(first[k] != v for k, v in mine.items()) or joins != layout.join_tick:
            raise ProtocolError(f"the nodes report {[first[k] for k in mine]} common features and ticks "
                                f"and join ticks {joins}; the settings give {list(mine.values())} and "
                                f"{layout.join_tick}")
        initial, _ = draw_parties(layout, s, self.method, self.seed, first["n_classes"], 0)
        self.server = FedAvgServer(state_arrays(initial)) if initial is not None else None
        return layout.join_tick, layout.n_ticks

    # -- the stream ----------------------------------------------------------------------------------
    def _send_global(self, m: int) -> list[bytes]:
        data = encode_update(self.server.broadcast([m])[0])
        self.ledger.add(m, "down", len(data))
        return [data]

    def run(self, checkpoint: Path | None = None) -> dict:
        """Set up, play every (remaining) segment, collect the nodes' byte counts; return the result.
        ``checkpoint``: save the server's state there (default: where :meth:`load` read it)."""
        t0 = time.perf_counter()
        s, K = self.settings, self.settings.clients
        start = int(self.saved["tick"]) if self.saved is not None else 0
        join, n_ticks = self._setup(start)
        federated = self.server is not None
        correct, seen = np.zeros((K, n_ticks)), np.zeros((K, n_ticks), dtype=bool)
        # the nodes' predictions and labels per client, tick and class (collapse: stream.share_fields)
        classes = (np.zeros((K, n_ticks, self.nodes[0]["n_classes"]), dtype=np.int64),
                   np.zeros((K, n_ticks, self.nodes[0]["n_classes"]), dtype=np.int64))
        learnt = [0] * K  # rows each node learnt since its last accepted upload (as the node counts)
        need: set[int] = set()  # nodes to send θ with their next request
        carried: list[int] = []  # the synchronisations (their tick) without any valid update
        path = Path(checkpoint) if checkpoint is not None else self.loaded
        first = self.nodes[0]
        folder = None if path is None else RunFolder(
            path.parent, self.identity(first["n_rows"], first["n_classes"]), METRIC_COLUMNS,
            resume=self.saved is not None, name=path.name, kind=DEPLOYED)
        elapsed = 0.0
        if folder is not None and folder.resume() is None and self.saved is not None:
            raise CheckpointError(f"{path}: gone since it was loaded")
        if self.saved is not None:
            v = self.saved
            if federated:
                self.server.state = tensors_to_arrays(v["server"]["tensors"])
                self.server.round = int(v["server"]["round"])
            correct, seen = v["correct"].numpy().copy(), v["seen"].numpy().astype(bool)
            if "predicted" in v:  # (a checkpoint from before the counts were kept: none before it)
                classes = (v["predicted"].numpy().copy(), v["labels"].numpy().copy())
            learnt, need = [int(x) for x in v["learnt"]], {int(m) for m in v["need"]}
            carried = [int(x) for x in v.get("carried", [])]
            load_ledger(self.ledger, v["ledger"])
            self.load_session_state(v["network"], before=True)
            elapsed = float(v["elapsed"])
            for m, got in sorted(self.nodes.items()):  # kept an older boundary (it was down at start)
                if got["tick"] != start - 1:
                    self.record_rejoin(m, start, got["tick"])
                    need.add(m)
        cuts = sorted(set(range(0, n_ticks, s.sync_every)) | set(join) | {n_ticks})
        for a, b in zip(cuts, cuts[1:]):
            if a < start:
                continue
            back = (self.link.rejoined() & self.link.available() & set(self.nodes))
            if back:
                came = self.set_up(back, a, self.setup_request(rejoin=True), self._rejoin_check(a))
                for m, got in came.items():
                    self.record_rejoin(m, a, got["tick"])
                    need.add(m)
            active = [k for k in range(K) if join[k] <= a]
            need |= {k for k in active if join[k] == a}
            upload = federated and b % s.sync_every == 0
            keep = folder is not None and upload and b < n_ticks  # a checkpoint after this sync
            info = SegmentRequest(until=b, upload=upload, keep=keep or None,
                                  boundary=b if keep else None).info()
            requests = {m: Envelope(ROUND, a, self._send_global(m) if federated and m in need else [],
                                    info.copy()) for m in self.reachable(active, a, ROUND)}
            need -= set(requests)
            ups: list[ModelUpdate] = []
            for m, reply in sorted(self.exchange(requests).items()):
                try:
                    counts, by_class, update, size = self._check(m, self.reply(reply, ROUND, a), a, b,
                                                                 upload, learnt[m])
                except FedstreamError as exc:
                    self.fault(m, a, ROUND, str(exc))
                    need.add(m)
                    continue
                correct[m, a:b], seen[m, a:b] = counts, True
                classes[0][m, a:b], classes[1][m, a:b] = by_class
                learnt[m] += (b - a) * s.batch
                if update is not None:
                    self.ledger.add(m, "up", size)
                    ups.append(update)
                    learnt[m] = 0
            if upload:
                if ups:
                    self.server.aggregate(ups)
                else:  # every node's reply lost (each one's fault): θ carries over to the next round
                    self._carry_over(b, carried, n_ticks)
                need |= set(active)
            if folder is not None:
                self._metrics(folder, correct, seen, join, a, b, classes)
            if keep:
                folder.save(self._state(b, correct, seen, learnt, need, classes) | {
                    "elapsed": elapsed + time.perf_counter() - t0, "carried": list(carried)})
        self._finish(n_ticks, need if federated else set())
        missed = [int((n_ticks - join[k]) - seen[k].sum()) for k in range(K)]
        return {"task": "chfl-stream", "method": self.method, "seed": self.seed, "settings": asdict(s),
                **stream_summary(correct, join, s, seen if any(missed) else None, classes),
                "bytes": self.ledger.summary(), "wall_seconds": elapsed + time.perf_counter() - t0,
                "resumed": self.saved is not None,
                "missed_ticks": missed, "faults": self.faults, "rejoins": self.rejoins,
                "exchanges": self.exchanges, "clients": self.reports, "carried_over": carried}

    def _carry_over(self, b: int, carried: list[int], n_ticks: int) -> None:
        """The synchronisation at tick ``b`` brought no valid update: θ carries over (``carried``).
        Twice in a row, or the run's only synchronisation: ProtocolError (the run cannot learn)."""
        every = self.settings.sync_every
        if b - every in carried or n_ticks // every == 1:
            raise ProtocolError(f"tick {b - 1}: no client node sent a valid model update"
                                f"{', nor at the synchronisation before' if b > every else ''} (faults: "
                                f"{[f['reason'] for f in self.faults[-3:]]})")
        self.server.carry_over()
        carried.append(b)

    def _metrics(self, folder: RunFolder, correct, seen, join: list[int], a: int, b: int, classes) -> None:
        """The simulator's metrics rows (tick, acc, top_class_share) of the ticks [a, b) just played."""
        every, n_ticks = self.settings.eval_every, correct.shape[1]
        played = all(seen[k, join[k]:b].all() for k in range(len(join)))  # no tick missed so far
        for end in range(a + 1, b + 1):
            if end % every == 0 or end == n_ticks:
                p = prequential_point(correct, join, self.settings.batch, ((end - 1) // every) * every, end,
                                      None if played else seen, classes)
                folder.append({k: p.get(k) for k in METRIC_COLUMNS})

    def _state(self, b: int, correct, seen, learnt: list[int], need: set[int], classes) -> dict:
        """Everything after tick ``b - 1`` (a checkpoint): the nodes keep their own state of ``b``."""
        server = None if self.server is None else {"round": self.server.round,
                                                   "tensors": arrays_to_tensors(self.server.state)}
        return {"tick": b, "server": server, "correct": torch.from_numpy(correct.copy()),
                "seen": torch.from_numpy(seen.astype(np.uint8)), "learnt": list(learnt),
                "need": sorted(need), "ledger": ledger_state(self.ledger), "network": self.session_state(),
                "predicted": torch.from_numpy(classes[0].copy()),
                "labels": torch.from_numpy(classes[1].copy())}

    def _rejoin_check(self, a: int):
        def accept(m: int, reply: Envelope) -> dict:
            got = self._check_setup(m, reply)
            self.check_behind(got["tick"], a)
            if not self.nodes:  # a resumed server's first setup: nothing to compare with yet
                return got
            unchanged(got, self.nodes[m], (*_SHARED, "join_tick"))
            return got
        return accept

    def _check(self, m: int, reply: Envelope, a: int, b: int, upload: bool,
               learnt: int) -> tuple[list[int], tuple[np.ndarray, np.ndarray], ModelUpdate | None, int]:
        """Validate client m's reply to ticks [a, b); return its counts, its predictions and labels per
        tick and class, its update and the update's bytes."""
        s = self.settings
        counts = SegmentReply.read(reply.info, f"ticks from {a}, reply", ticks=b - a, batch=s.batch).correct
        by_class = self._by_class(reply, b - a)
        if len(reply.parts) != int(upload):
            raise ProtocolError(f"expected {int(upload)} model message(s), received {len(reply.parts)}")
        if not upload:
            return counts, by_class, None, 0
        msg = check_update(reply.parts[0], "", client=m, round=self.server.round, fits=self.server.state,
                           column="the global column")
        rows = learnt + (b - a) * s.batch
        # a node that had a fault (or came back) may have learnt rows the server did not count (a
        # segment whose reply was refused), or lost some: any positive number of whole batches is taken
        whole = msg.n_samples > 0 and msg.n_samples % s.batch == 0
        if msg.n_samples != rows and not (self.troubled(m) and whole):
            raise ProtocolError(f"the model says {msg.n_samples} samples, the node learnt {rows} rows since "
                                "its last update")
        return counts, by_class, msg, len(reply.parts[0])

    def _by_class(self, reply: Envelope, ticks: int) -> tuple[np.ndarray, np.ndarray]:
        """The reply's ``predicted`` and ``labels`` arrays: per tick and class, counts that sum to the
        batch in every tick."""
        want = (ticks, self.nodes[0]["n_classes"])
        if set(reply.arrays) != {"predicted", "labels"}:
            raise ProtocolError(f"expected arrays ['labels', 'predicted'], received "
                                f"{sorted(reply.arrays)}"[:300])
        for name in ("predicted", "labels"):
            v = reply.arrays[name]
            if (v.shape != want or v.dtype.kind not in "iu" or (v < 0).any()
                    or (v.sum(axis=1) != self.settings.batch).any()):
                raise ProtocolError(f"array {name!r} must be {want[0]} x {want[1]} counts (ticks x classes) "
                                    f"summing to {self.settings.batch} per tick, received {v.dtype} "
                                    f"{v.shape}"[:300])
        return reply.arrays["predicted"], reply.arrays["labels"]

    def _finish(self, n_ticks: int, need: set[int]) -> None:
        """The last broadcast (after a synchronisation at the very end) and every node's byte counts."""
        available = sorted(set(self.nodes) & self.link.available())
        replies = self.exchange({m: Envelope(FINISH, n_ticks, self._send_global(m) if m in need else [], {})
                                 for m in available})
        self.reports = []
        for m, reply in sorted(replies.items()):
            try:
                got = FinishReply.read(self.reply(reply, FINISH, n_ticks).info, "finish reply", needs=COUNTS)
            except FedstreamError as exc:
                self.fault(m, n_ticks, FINISH, str(exc))
                continue
            self.reports.append(counts_report(self, m, n_ticks, got, self.ledger))

    # -- as deploy.serve runs it ------------------------------------------------------------------
    def where(self) -> str:
        return f"at tick {self.saved['tick']}"

    def play(self, checkpoint: Path | None, *, audit: bool) -> dict:
        return self.run(checkpoint=checkpoint)

    def audit(self) -> dict:
        """The final global common column (``models``)."""
        return {"models": {f"global.{k}": v for k, v in self.global_common().items()}}

    def global_common(self) -> dict[str, np.ndarray]:
        """The final global common column (empty for Local)."""
        return dict(self.server.state) if self.server is not None else {}
