"""The server party of a deployed streaming CHFL run (``chfl.mode = "stream"``).

:class:`NetworkStream` runs the simulator's stream loop (:class:`fedstream.chfl.stream.StreamRun`)
over :class:`RemoteStreamCohort`: client nodes (:mod:`fedstream.chfl.deploy.stream_node`), one
request per node and segment of ticks. The server holds no data: it computes the run's layout from
the sizes the nodes report and draws the initial global column as the simulator does. Without
faults the result and the final global column are the simulator's. The requests, replies,
checks, faults, rejoins and checkpoints: docs/deploy-protocol.md, "Streaming CHFL".
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from fedstream.chfl.checkpoint import CheckpointError
from fedstream.chfl.deploy.data import stream_config_settings
from fedstream.chfl.deploy.driver import CHFLServer
from fedstream.chfl.deploy.proxy import RemoteClients
from fedstream.chfl.deploy.records import SegmentReply, SegmentRequest, StreamSetupReply, check_update
from fedstream.chfl.stream import (
    METRIC_COLUMNS,
    Played,
    Segment,
    StreamLayout,
    StreamRun,
    draw_parties,
    stream_layout,
)
from fedstream.data.chfl_datasets import SPECS
from fedstream.deploy.reconcile import COUNTS, check_client
from fedstream.deploy.records import FINISH, ROUND, Envelope, Link
from fedstream.errors import ProtocolError
from fedstream.transport.updates import ModelUpdate

_SHARED = ("n_rows", "n_features", "n_common", "n_classes", "n_ticks")


class RemoteStreamCohort(RemoteClients):
    """Client nodes 0..K-1 of a streaming run behind ``link``, as a
    :class:`~fedstream.chfl.stream.StreamCohort`."""

    position = ("tick",)  # a run's position: the tick a segment starts at
    run_name = "streaming CHFL"
    shared = _SHARED
    kept = (*_SHARED, "join_tick")

    def __init__(self, link: Link, config: dict, *, run_token: str | None = None):
        super().__init__(link, config, stream_config_settings(config), run_token=run_token)
        self.learnt = [0] * self.settings.clients  # rows each node learnt since its last accepted upload
        self.behind: set[int] = set()  # nodes a resumed server found behind its checkpoint

    def setup(self, *, resume: int | None = None) -> tuple[dict, StreamLayout]:
        """Set every node up (``resume``: at that tick, from the server's checkpoint); return client 0's
        report and the run's layout, checked against every node's."""
        s, K, seed = self.settings, self.settings.clients, self.config["seed"]
        first = self.set_up_all(resume or 0, resume=resume, boundary=resume)
        self.behind = {m for m, got in self.nodes.items() if resume is not None and got["tick"] != resume - 1}
        if first["n_classes"] != SPECS[s.dataset].n_classes:
            raise ProtocolError(f"the nodes report {first['n_classes']} classes, expected "
                                f"{SPECS[s.dataset].n_classes} for data.name = {s.dataset!r}")
        layout = stream_layout(first["n_rows"], first["n_features"], s, seed)
        mine = {"n_common": len(layout.features.common), "n_ticks": layout.n_ticks}
        joins = [self.nodes[m]["join_tick"] for m in range(K)]
        if any(first[k] != v for k, v in mine.items()) or joins != layout.join_tick:
            raise ProtocolError(f"the nodes report {[first[k] for k in mine]} common features and ticks "
                                f"and join ticks {joins}; the settings give {list(mine.values())} and "
                                f"{layout.join_tick}")
        return first, layout

    def _before(self, at: int) -> int:
        return at - 1

    def _check_setup(self, m: int, reply: Envelope) -> dict:
        got = StreamSetupReply.read(reply.info, "setup reply")
        check_client(got.client, m)
        return got.info() | {"position": got.tick}

    # -- the StreamCohort interface ------------------------------------------------------------------
    def come_back(self, t: int) -> set[int]:
        back, self.behind = self.behind, set()
        return back | self.set_up_again(t, t)

    def play(self, seg: Segment) -> dict[int, Played]:
        a, b = seg.start, seg.until
        info = SegmentRequest(until=b, upload=seg.upload is not None, keep=seg.keep or None,
                              boundary=b if seg.keep else None).info()
        requests = {m: Envelope(ROUND, a, [self.send(m, seg.models[m])] if m in seg.models else [],
                                info.copy()) for m in self.sendable(seg.clients, a)}
        return self.answers(requests, ROUND, a, lambda m, reply: self._accept(m, reply, seg))

    def _accept(self, m: int, reply: Envelope, seg: Segment) -> Played:
        """Validate client m's reply to the segment (its counts per tick, its predictions and labels per
        tick and class, and at a synchronisation its update) and count what it learnt and sent."""
        s, a, b, server = self.settings, seg.start, seg.until, seg.upload
        counts = SegmentReply.read(reply.info, f"ticks from {a}, reply", ticks=b - a, batch=s.batch).correct
        predicted, labels = self._by_class(reply, b - a)
        if len(reply.parts) != int(server is not None):
            raise ProtocolError(f"expected {int(server is not None)} model message(s), received "
                                f"{len(reply.parts)}")
        rows = self.learnt[m] + (b - a) * s.batch
        if server is None:
            self.learnt[m] = rows
            return Played(np.array(counts), predicted, labels, None)
        msg = check_update(reply.parts[0], "", client=m, round=server.round, fits=server.state,
                           column="the global column")
        # a node that had a fault (or came back) may have learnt rows the server did not count (a
        # segment whose reply was refused), or lost some: any positive number of whole batches is taken
        whole = msg.n_samples > 0 and msg.n_samples % s.batch == 0
        if msg.n_samples != rows and not (self.troubled(m) and whole):
            raise ProtocolError(f"the model says {msg.n_samples} samples, the node learnt {rows} rows since "
                                "its last update")
        self.ledger.add(m, "up", len(reply.parts[0]))
        self.learnt[m] = 0
        return Played(np.array(counts), predicted, labels, msg)

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

    def finish(self, t: int, models: dict[int, ModelUpdate]) -> None:
        """The last broadcast (after a synchronisation at the very end) and every node's byte counts."""
        requests = {m: Envelope(FINISH, t, [self.send(m, models[m])] if m in models else [], {})
                    for m in sorted(set(self.nodes) & self.link.available())}
        self.finish_reports(requests, t, COUNTS)

    def checkpoint_state(self) -> dict:
        """What the server knows of its nodes; the nodes keep their own state of the same tick."""
        return {"learnt": list(self.learnt), "network": self.session_state()}

    def load_checkpoint(self, state) -> None:
        self.learnt = [int(x) for x in state["learnt"]]
        self.load_session_state(state["network"], before=True)


class NetworkStream(CHFLServer):
    """The server's side of one deployed streaming CHFL run; ``link`` reaches nodes 0..K-1."""

    def __init__(self, link: Link, config: dict):
        super().__init__(config, RemoteStreamCohort(link, config))

    def identity(self, n_rows: int | None, n_classes: int | None) -> dict:
        """Which run a checkpoint is of (the simulator's stream identity; the kind tells them apart)."""
        return {"task": "chfl-stream", "settings": asdict(self.settings), "method": self.method,
                "seed": self.seed, "n_rows": n_rows, "n_classes": n_classes}

    def run(self, checkpoint: Path | None = None) -> dict:
        """Set up, play every (remaining) segment, collect the nodes' byte counts; return the result.
        ``checkpoint``: save the server's state there (default: where :meth:`load` read it)."""
        t0 = time.perf_counter()
        s, cohort = self.settings, self.cohort
        first, layout = cohort.setup(resume=int(self.saved["tick"]) if self.saved is not None else None)
        folder = self.folder(checkpoint, first["n_rows"], first["n_classes"], METRIC_COLUMNS)
        initial, _ = draw_parties(layout, s, self.method, self.seed, first["n_classes"], 0)
        self.loop = run = StreamRun(s, layout, first["n_classes"], initial, cohort, folder)
        if self.saved is not None and run.resumed is None:
            raise CheckpointError(f"{folder.checkpoint}: gone since it was loaded")
        run.run()
        return {"task": "chfl-stream", "method": self.method, "seed": self.seed, "settings": asdict(s),
                **run.summary(), "bytes": cohort.ledger.summary(),
                "wall_seconds": run.elapsed + time.perf_counter() - t0, "missed_ticks": run.missed(),
                **self.network()}

    def where(self) -> str:
        return f"at tick {self.saved['tick']}"
