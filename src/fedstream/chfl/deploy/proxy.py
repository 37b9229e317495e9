"""The server's side of a deployed CHFL run: the clients as a :class:`~fedstream.chfl.trainer.Cohort`
over a link.

:class:`RemoteCohort` is what :class:`fedstream.chfl.trainer.BatchRun` (the simulator's round
loop, unchanged) talks to when the clients live on their own nodes
(:mod:`fedstream.chfl.deploy.host`). One request per node per round, all nodes at once (the
requests and replies: :mod:`fedstream.chfl.deploy.records`).

The ledger counts the encoded ModelUpdates exactly as the simulator's
:class:`~fedstream.transport.tensors.ModelTransport` does (θ^t down when sent, θ_k^t up when
accepted), so a run without faults has the simulator's byte counts per client and direction. At
the finish each node's own counts must equal the server's; a difference is a fault, except for a
client that had a fault or a rejoin (:meth:`~fedstream.deploy.session.Session.troubled`: a
message lost on the way, or a node gone back to an older state, counts on one end only).

Every reply is validated before any of it is used: kind and round, the accuracy (a finite number
in [0, 1]), the sample count (the one the node reported at setup), and the model: decoded (header,
length, finite values), from this client, for this round, with the tensor names and shapes of the
global column sent. A node whose reply fails a check, whose ClientApp failed or which did not
answer in time is logged and recorded (``faults``) and left out of that round: FedAvg averages
the other clients' updates (weighted by their counts) and the node gets θ^{t+1} with the next
round. A round with no valid update at all (every node's reply lost: each one's fault) keeps θ^t
(``carried_over``; a second in a row ends the run: BatchRun). A setup that does not agree ends
the run with a :class:`~fedstream.errors.ProtocolError` that says why.

A node that comes back (a new SuperNode in the place of one that crashed or hangs:
``link.rejoined()``, asked before every round and before the finish) is set up again with
``rejoin``: it reloads its latest state from its cache folder (:mod:`fedstream.deploy.session`) and
reports where it is (federation, round). The server checks its sizes and columns against its
first setup and that it is not ahead of the run, records the rejoin (``rejoins``) and from the
next round request on it takes part again: θ^t replaces its common column, its unique column and
heads continue from its checkpoint. A node that lost everything comes back as a fresh party
(position -1, -1): fresh, identically seeded weights for the current federation and no
validation records before the rejoin, so its choice is among the rounds it played since.

With ``keep`` set (the server checkpoints, :class:`~fedstream.chfl.deploy.driver.NetworkCHFL`),
a round request after which the server checkpoints (:func:`~fedstream.chfl.trainer.checkpointed_after`)
carries ``keep`` and the boundary (:func:`~fedstream.chfl.trainer.boundary`): each node keeps its
state of that point, and a server resumed from its checkpoint sets the nodes up with ``resume``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence

from fedstream.chfl.cohort import RoundResult
from fedstream.chfl.deploy.data import chfl_config_settings
from fedstream.chfl.deploy.records import (
    SHARED_SIZES,
    SIZES,
    RoundReply,
    RoundRequest,
    SetupReply,
    check_update,
)
from fedstream.chfl.rounds import boundary, checkpointed_after
from fedstream.chfl.selection import Choice
from fedstream.chfl.splits import SettingError, n_common_features
from fedstream.data.chfl_datasets import SPECS
from fedstream.deploy.host import FinishReply
from fedstream.deploy.reconcile import agree, check_client, counts_report, unchanged
from fedstream.deploy.records import FINISH, ROUND, Envelope, Link
from fedstream.deploy.session import Session
from fedstream.errors import FedstreamError, ProtocolError
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.tensors import encode_update
from fedstream.transport.updates import ModelUpdate

REQUIRED_CHOICE = {"lr", "candidate", "round", "val_acc", "test_acc"}  # a node's choice, per variant
SHARES = {"top_class_share", "label_top_class_share"}  # and, from nodes that report them, its collapse shares


class RemoteCohort(Session):
    """Client nodes 0..K-1 of a CHFL run behind ``link`` (see the module doc)."""

    position = ("lr_index", "round")  # a run's position: (federation, round)

    def __init__(self, link: Link, config: dict, *, run_token: str | None = None):
        super().__init__(link, config, run_token=run_token)
        self.settings = chfl_config_settings(config)
        K = self.settings.clients
        if link.n_clients != K:
            raise ProtocolError(f"the link reaches {link.n_clients} client nodes, chfl.clients = {K}")
        self.ledger = ByteLedger(K)
        self.nodes: dict[int, dict] = {}  # client -> what its node reported at its first setup
        self.ready: set[int] = set()  # clients whose node is set up (a failed rejoin leaves one out)
        self.reports: list[dict] = []  # the nodes' byte counts at the end
        self.lr_index = -1
        self.keep = False  # the server checkpoints: the nodes keep their state at the same points

    # -- setup -----------------------------------------------------------------------------------
    def setup(self, *, resume: tuple[int, int] | None = None) -> dict:
        """Send every node the config; return the sizes they agree on (``n_common``, ``n_classes``,
        ``n_rows``, ...) and the feature split's indices (``common``, ``unique`` per client).

        ``resume``: the server restarts from its checkpoint at this position (federation, next
        round); each node goes back to its state of that boundary (``rejoin``, ``resume``). A node
        found elsewhere (it kept no state of that boundary) is recorded as a rejoin and goes on
        from where it is; one ahead of the run is a fault.
        """
        K, s = self.settings.clients, self.settings
        info = self.setup_request() if resume is None else self.setup_request(
            rejoin=True, resume=boundary(*resume, s.rounds))
        t = 0 if resume is None else resume[1]

        def accept(m: int, reply: Envelope) -> dict:
            got = self._check_setup(m, reply)
            if resume is not None:
                self.check_behind(got["position"], resume, expected=self._before(resume))
            return got

        for m, got in self.set_up(self.link.available(), t, info, accept).items():
            self.nodes[m] = got
            if resume is not None and got["position"] != self._before(resume):
                self.record_rejoin(m, resume, got["position"])
        self.require_all(self.nodes, K, f"a CHFL run needs all chfl.clients = {K}")
        self.ready = set(self.nodes)
        first = agree(self.nodes, (*SHARED_SIZES, "common"))
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

    def rejoin(self, clients: set[int], at: tuple[int, int]) -> None:
        """Set ``clients`` up again (their node is new, or was not set up) before the run's position
        ``at`` (federation, next round): each resumes from its latest checkpoint (see the module doc)."""
        def accept(m: int, reply: Envelope) -> dict:
            got = self._check_setup(m, reply)
            unchanged(got, self.nodes[m], (*SIZES, "common", "unique"))
            self.check_behind(got["position"], at)
            return got

        self.ready -= set(clients)
        for m, got in self.set_up(clients, at[1], self.setup_request(rejoin=True), accept,
                                  refused="rejoin refused: ").items():
            self.ready.add(m)
            self.record_rejoin(m, at, got["position"])

    def _come_back(self, at: tuple[int, int]) -> None:
        """Before a request to every node: set up those that came back, and retry those not set up."""
        back = (
            (self.link.rejoined() | (set(self.nodes) - self.ready)) & self.link.available() & set(self.nodes)
        )
        if back:
            self.rejoin(back, at)

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
        sent: dict[int, ModelUpdate | None] = {}
        requests = {}
        self._come_back((self.lr_index, t))
        reachable = set(self.reachable(self.nodes, t, ROUND))
        for m in sorted(reachable - self.ready):
            self.fault(m, t, ROUND, "not sent: the node is not set up (its rejoin failed)")
        keep = self.keep and checkpointed_after(t, self.settings.rounds)
        info = RoundRequest(
            lr_index=self.lr_index,
            validate=validate,
            epochs=epochs,
            keep=keep or None,
            boundary=boundary(self.lr_index, t + 1, self.settings.rounds) if keep else None,
        ).info()
        for m in sorted(set(self.nodes) & reachable & self.ready):
            parts = []
            if models is not None:
                sent[m] = models[m]
                data = encode_update(models[m])
                self.ledger.add(m, "down", len(data))
                parts.append(data)
            requests[m] = Envelope(ROUND, t, parts, info.copy())
        out = RoundResult()
        ups: dict[int, ModelUpdate] = {}
        for m, reply in self.exchange(requests).items():
            try:
                val, update, size = self._check_round(m, self.reply(reply, ROUND, t), t, validate, epochs,
                                                      sent.get(m))
            except FedstreamError as exc:  # every check of a node's reply raises one of these
                self.fault(m, t, ROUND, str(exc))
                continue
            if validate:
                out.val[m] = val
            if update is not None:
                self.ledger.add(m, "up", size)
                ups[m] = update
        out.updates = [ups[m] for m in sorted(ups)]
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
        self._come_back((len(self.settings.lrs), 0))
        replies = self.exchange({m: Envelope(FINISH, t, [], {})
                                  for m in sorted(set(self.nodes) & self.link.available() & self.ready)})
        picks: dict[int, dict[str, Choice]] = {}
        self.reports = []
        for m, reply in sorted(replies.items()):
            try:
                got = FinishReply.read(self.reply(reply, FINISH, t).info, "finish reply", needs=("choices",))
                picks[m] = self._check_choices(got, variants)
            except FedstreamError as exc:
                self.fault(m, t, FINISH, str(exc))
                continue
            self.reports.append(counts_report(self, m, t, got, self.ledger))
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
                and all(
                    isinstance(ch[k], (int, float)) and not isinstance(ch[k], bool) and 0.0 <= ch[k] <= 1.0
                    for k in ("val_acc", "test_acc")
                )
                and all(  # collapse shares (fedstream.metrics.collapse): NaN when a node could not tell
                    isinstance(ch[k], (int, float)) and not isinstance(ch[k], bool)
                    and (math.isnan(ch[k]) or 0.0 <= ch[k] <= 1.0)
                    for k in SHARES & set(ch)
                )
            )
            if not ok:
                raise ProtocolError(f"variant {name!r}: malformed choice {ch!r}"[:300])
            out[name] = Choice(float(ch["lr"]), ch["candidate"], ch["round"], float(ch["val_acc"]),
                               float(ch["test_acc"]), float(ch.get("top_class_share", math.nan)),
                               float(ch.get("label_top_class_share", math.nan)))
        return out
