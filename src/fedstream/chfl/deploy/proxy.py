"""The server's side of a deployed CHFL run: the client nodes as the simulator's cohort.

:class:`RemoteClients` is what both CHFL servers share (setup of every node, a node set up again,
θ sent and counted); :class:`RemoteCohort` is the batch loop's
:class:`~fedstream.chfl.cohort.Cohort` (one request per node and round), :class:`RemoteStreamCohort`
the stream loop's :class:`~fedstream.chfl.stream.StreamCohort` (one per node and segment of ticks).
The requests, checks, faults and rejoins: docs/deploy-protocol.md, "CHFL".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from fedstream.chfl.cohort import RoundResult
from fedstream.chfl.deploy.data import chfl_config_settings, stream_config_settings
from fedstream.chfl.deploy.records import (
    SHARED_SIZES,
    SIZES,
    RoundReply,
    RoundRequest,
    SegmentReply,
    SegmentRequest,
    SetupReply,
    StreamSetupReply,
    check_update,
)
from fedstream.chfl.rounds import boundary, checkpointed_after
from fedstream.chfl.selection import Choice
from fedstream.chfl.splits import SettingError, n_common_features
from fedstream.chfl.stream import Played, Segment, StreamLayout, stream_layout
from fedstream.data.chfl_datasets import SPECS
from fedstream.deploy.host import FinishReply
from fedstream.deploy.reconcile import COUNTS, agree, check_client, counts_report, unchanged
from fedstream.deploy.records import FINISH, ROUND, Envelope, Link
from fedstream.deploy.remote import RemoteNodes
from fedstream.errors import ProtocolError
from fedstream.transport.tensors import encode_update
from fedstream.transport.updates import ModelUpdate

STREAM_SHARED = ("n_rows", "n_features", "n_common", "n_classes", "n_ticks")  # every streaming node's
REQUIRED_CHOICE = {"lr", "candidate", "round", "val_acc", "test_acc"}  # a node's choice, per variant
SHARES = {"top_class_share", "label_top_class_share"}  # and, from nodes that report them, its collapse shares


def _fraction(v: object, *, nan: bool = False) -> bool:
    """Whether ``v`` is a number in [0, 1] (``nan``: or NaN)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    return 0.0 <= v <= 1.0 or (nan and math.isnan(v))


class RemoteClients(RemoteNodes):
    """Client nodes 0..K-1 of a CHFL run behind ``link``, as both CHFL servers see them.

    ``nodes`` holds each node's report at its first setup, with its ``position``. A subclass names
    the reports every node shares (``shared``), those a node set up again must repeat (``kept``)
    and checks a setup reply (:meth:`_check_setup`)."""

    run_name = "CHFL"
    shared: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()

    def __init__(self, link: Link, config: dict, settings, *, run_token: str | None = None):
        super().__init__(link, config, clients=("chfl.clients", settings.clients), run_token=run_token)
        self.settings = settings

    def _check_setup(self, m: int, reply: Envelope) -> dict:
        raise NotImplementedError

    def _before(self, at):
        """The position a node last played when the run is at ``at``."""
        raise NotImplementedError

    def _expected(self, at):
        """Where a resumed node is expected, for the error (None: "before ``at``")."""
        return None

    def set_up_all(self, t: int, *, resume=None, boundary: int | None = None) -> Mapping:
        """Send every node the config (request number ``t``); return client 0's report, which every
        node shares. ``resume``: the server restarts from its checkpoint at this position and
        ``boundary``; a node found elsewhere than just before it is recorded as a rejoin, one
        ahead of it is a fault."""
        info = self.setup_request() if resume is None else self.setup_request(rejoin=True, resume=boundary)

        def accept(m: int, reply: Envelope) -> dict:
            got = self._check_setup(m, reply)
            if resume is not None:
                self.check_behind(got["position"], resume, expected=self._expected(resume))
            return got

        for m, got in self.set_up(self.link.available(), t, info, accept, fresh=True).items():
            self.nodes[m] = got
            if resume is not None:
                self.reconcile(m, resume, got["position"], self._before(resume))
        K = self.settings.clients
        self.require_all(self.nodes, K, f"a {self.run_name} run needs all chfl.clients = {K}")
        return agree(self.nodes, self.shared)

    def set_up_again(self, at, t: int) -> set[int]:
        """Before request ``t`` (the run at ``at``): set up the nodes that came back, and retry those
        not set up; each resumes from its latest checkpoint. Return those set up again."""
        back = self.link.rejoined() | (set(self.nodes) - self.ready)
        back &= self.link.available() & set(self.nodes)
        if not back:
            return set()

        def accept(m: int, reply: Envelope) -> dict:
            got = self._check_setup(m, reply)
            unchanged(got, self.nodes[m], self.kept)
            self.check_behind(got["position"], at)
            return got

        came = self.set_up(back, t, self.setup_request(rejoin=True), accept, refused="rejoin refused: ")
        for m, got in came.items():
            self.record_rejoin(m, at, got["position"])
        return set(came)

    def send(self, m: int, msg: ModelUpdate) -> bytes:
        """θ for client m, encoded and counted as sent."""
        data = encode_update(msg)
        self.ledger.add(m, "down", len(data))
        return data


class RemoteCohort(RemoteClients):
    """Client nodes 0..K-1 of a CHFL run behind ``link``, as a :class:`~fedstream.chfl.cohort.Cohort`."""

    position = ("lr_index", "round")  # a run's position: (federation, round)
    shared = (*SHARED_SIZES, "common")
    kept = (*SIZES, "common", "unique")

    def __init__(self, link: Link, config: dict, *, run_token: str | None = None):
        super().__init__(link, config, chfl_config_settings(config), run_token=run_token)
        self.lr_index = -1
        self.keep = False  # the server checkpoints: the nodes keep their state at the same points

    def setup(self, *, resume: tuple[int, int] | None = None) -> dict:
        """Send every node the config; return the sizes they agree on (``n_common``, ``n_classes``,
        ``n_rows``, ...) and the feature split's indices (``common``, ``unique`` per client).
        ``resume``: the server restarts from its checkpoint at this position (federation, next
        round); each node goes back to its state of that boundary."""
        K, s = self.settings.clients, self.settings
        first = self.set_up_all(0 if resume is None else resume[1], resume=resume,
                                boundary=None if resume is None else boundary(*resume, s.rounds))
        want_classes = SPECS[s.dataset].n_classes
        try:
            want_common = n_common_features(first["n_features"], K, s.common_ratio)
        except SettingError as exc:
            raise ProtocolError(f"the nodes report {first['n_features']} features: {exc}") from None
        if first["n_classes"] != want_classes or first["n_common"] != want_common:
            raise ProtocolError(
                f"the nodes report {first['n_classes']} classes and {first['n_common']} common features, "
                f"expected {want_classes} and {want_common} for data.name = {s.dataset!r}"
            )
        return {k: first[k] for k in SHARED_SIZES} | {"common": first["common"],
                                                      "unique": [self.nodes[m]["unique"] for m in range(K)]}

    def _before(self, at: tuple[int, int]) -> tuple[int, int]:
        """The (federation, round) a node last played when the run is at ``at`` (next round)."""
        i, t = at
        return (i, t - 1) if t > 0 else (i - 1, self.settings.rounds if i > 0 else -1)

    _expected = _before

    def _check_setup(self, m: int, reply: Envelope) -> dict:
        got = SetupReply.read(reply.info, "setup reply")
        check_client(got.client, m)
        return {"position": (got.lr_index, got.round)} | {
            k: getattr(got, k) for k in (*SIZES, "common", "unique")
        }

    # -- the Cohort interface ----------------------------------------------------------------------
    def start(self, lr: float) -> None:
        """The next federation; the nodes build fresh clients at its first round request."""
        self.lr_index += 1
        if self.settings.lrs[self.lr_index] != lr:
            raise ProtocolError(
                f"federation {self.lr_index}: expected learning rate {self.settings.lrs[self.lr_index]}, "
                f"asked for {lr}"
            )

    def round(self, lr: float, t: int, models: Sequence[ModelUpdate] | None, *, validate: bool,
              epochs: int) -> RoundResult:
        self.set_up_again((self.lr_index, t), t)
        keep = self.keep and checkpointed_after(t, self.settings.rounds)
        info = RoundRequest(
            lr_index=self.lr_index,
            validate=validate,
            epochs=epochs,
            keep=keep or None,
            boundary=boundary(self.lr_index, t + 1, self.settings.rounds) if keep else None,
        ).info()
        to = self.sendable(self.nodes, t)
        sent = {m: models[m] for m in to} if models is not None else {}
        requests = {m: Envelope(ROUND, t, [self.send(m, sent[m])] if m in sent else [], info.copy())
                    for m in to}
        out = RoundResult()
        got = self.answers(requests, t, lambda m, reply: self._check_round(m, reply, t, validate, epochs,
                                                                         sent.get(m)), kind=ROUND)
        for m, (val, update, size) in got.items():
            if validate:
                out.val[m] = val
            if update is not None:
                self.ledger.add(m, "up", size)
                out.updates.append(update)
        return out  # no valid reply at all: every node's fault; θ carries over (BatchRun)

    def _check_round(self, m: int, reply: Envelope, t: int, validate: bool, epochs: int,
                     sent: ModelUpdate | None) -> tuple[float, ModelUpdate | None, int]:
        """Validate client m's reply to round t; return (best validation accuracy, update, its bytes)."""
        val = RoundReply.read(reply.info, f"round {t} reply", validate=validate).val
        want = 1 if epochs and sent is not None else 0
        if len(reply.parts) != want:
            raise ProtocolError(f"expected {want} model message(s), received {len(reply.parts)}")
        if not want:
            return float(val) if validate else math.nan, None, 0
        data = reply.parts[0]
        msg = check_update(data, "", client=m, round=t, fits=sent.tensors, column="the global common column")
        n_train = self.nodes[m]["n_train"]
        if msg.n_samples != n_train:
            raise ProtocolError(
                f"the model says {msg.n_samples} samples, the node reported {n_train} train rows"
            )
        return float(val) if validate else math.nan, msg, len(data)

    def test_choices(self, variants: Mapping[str, Callable[[str], bool]]) -> dict[str, list[Choice]]:
        """Each node scores its own choices on its test rows; only the numbers come back."""
        t = self.settings.rounds
        self.set_up_again((len(self.settings.lrs), 0), 0)
        requests = {m: Envelope(FINISH, t, [], {})
                    for m in sorted(set(self.nodes) & self.link.available() & self.ready)}
        picks = {}

        def report(m: int, reply: Envelope, got: FinishReply) -> dict:
            picks[m] = self._check_choices(got, variants)
            return counts_report(self, m, t, got)

        self.finish_reports(requests, t, ("choices",), report)
        if not picks:
            raise ProtocolError("no client node reported its choices (see faults)")
        return {name: [picks[m][name] for m in sorted(picks)] for name in variants}

    # -- checkpoints (the Cohort interface) ----------------------------------------------------
    def checkpoint_state(self, *, mid_federation: bool) -> dict:
        """What the server knows of its nodes: the run's token, faults, rejoins, requests sent. The
        nodes' own state stays on the nodes (they keep it at the same points: ``keep``)."""
        return {"network": self.session_state()}

    def load_checkpoint(self, state: Mapping) -> None:
        """Put the checkpoint's history before what happened since the restart (the resuming setup)."""
        self.load_session_state(state["network"], before=True)
        self.lr_index = int(state["lr_index"]) - 1  # start() moves on to the checkpoint's federation

    def load_federation(self, state: Mapping) -> None:
        """Nothing: each node went back to its own state of the checkpoint's boundary at setup."""

    def _check_choices(
        self, reply: FinishReply, variants: Mapping[str, Callable[[str], bool]]
    ) -> dict[str, Choice]:
        try:
            raw = json.loads(reply.choices)
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"info 'choices' is not JSON ({exc})"[:300]) from None
        if not isinstance(raw, dict) or set(raw) != set(variants):
            raise ProtocolError(f"expected choices for {sorted(variants)}, received "
                                f"{sorted(raw) if isinstance(raw, dict) else type(raw).__name__}"[:300])
        s, out = self.settings, {}
        for name, ch in raw.items():
            ok = (
                isinstance(ch, dict)
                and REQUIRED_CHOICE <= set(ch) <= REQUIRED_CHOICE | SHARES
                and ch["lr"] in s.lrs
                and isinstance(ch["candidate"], str)
                and variants[name](ch["candidate"])
                and not isinstance(ch["round"], bool)
                and isinstance(ch["round"], int)
                and 1 <= ch["round"] <= s.rounds
                and all(_fraction(ch[k]) for k in ("val_acc", "test_acc"))
                # collapse shares (fedstream.metrics.collapse): NaN when a node could not tell
                and all(_fraction(ch[k], nan=True) for k in SHARES & set(ch))
            )
            if not ok:
                raise ProtocolError(f"variant {name!r}: malformed choice {ch!r}"[:300])
            out[name] = Choice(float(ch["lr"]), ch["candidate"], ch["round"], float(ch["val_acc"]),
                               float(ch["test_acc"]), float(ch.get("top_class_share", math.nan)),
                               float(ch.get("label_top_class_share", math.nan)))
        return out


class RemoteStreamCohort(RemoteClients):
    """Client nodes 0..K-1 of a streaming run behind ``link``, as a
    :class:`~fedstream.chfl.stream.StreamCohort`."""

    position = ("tick",)  # a run's position: the tick a segment starts at
    run_name = "streaming CHFL"
    shared = STREAM_SHARED
    kept = (*STREAM_SHARED, "join_tick")

    def __init__(self, link: Link, config: dict, *, run_token: str | None = None):
        super().__init__(link, config, stream_config_settings(config), run_token=run_token)
        self.learnt = [0] * self.settings.clients  # rows each node learnt since its last accepted upload
        self.behind: set[int] = set()  # nodes a resumed server found behind its checkpoint

    def setup(self, *, resume: int | None = None) -> tuple[dict, StreamLayout]:
        """Set every node up (``resume``: at that tick, from the server's checkpoint); return client 0's
        report and the run's layout, checked against every node's."""
        s, K, seed = self.settings, self.settings.clients, self.config["seed"]
        first = self.set_up_all(resume or 0, resume=resume, boundary=resume)
        self.behind = set() if resume is None else {
            m for m, got in self.nodes.items() if got["tick"] != self._before(resume)}
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
        return self.answers(requests, a, lambda m, reply: self._accept(m, reply, seg), kind=ROUND)

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
