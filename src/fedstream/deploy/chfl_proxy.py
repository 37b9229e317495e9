"""The server's side of a deployed CHFL run: the clients as a :class:`~fedstream.hfl.trainer.Cohort` over a link.

:class:`RemoteCohort` is what :class:`fedstream.hfl.trainer.BatchRun` (the simulator's round
loop, unchanged) talks to when the clients live on their own nodes
(:mod:`fedstream.deploy.chfl_host`). One request per node per round, all nodes at once:

=========  ================================================  ====================================
request    carries (server -> node)                          reply (node -> server)
=========  ================================================  ====================================
setup      the run's config (JSON) and token                 the node's sizes and column indices
round t    θ^t, an encoded ModelUpdate (none for Local);     θ_k^t, an encoded ModelUpdate (when
           ``lr_index``, ``validate``, ``epochs``            trained); best validation accuracy
finish     nothing                                           per variant: lr, candidate, round,
                                                             validation and test accuracy; the
                                                             node's byte counts
=========  ================================================  ====================================

The ledger counts the encoded ModelUpdates exactly as the simulator's
:class:`~fedstream.transport.tensors.ModelTransport` does (θ^t down when sent, θ_k^t up when
accepted), so a run without faults has the simulator's byte counts per client and direction.

Every reply is validated before any of it is used: kind and round, the accuracy (a finite number
in [0, 1]), the sample count (the one the node reported at setup), and the model: decoded (header,
length, finite values), from this client, for this round, with the tensor names and shapes of the
global column sent. A node whose reply fails a check, whose ClientApp failed or which did not
answer in time is logged and recorded (``faults``) and left out of that round: FedAvg averages
the other clients' updates (weighted by their counts) and the node gets θ^{t+1} with the next
round. A round with no valid update at all, or a setup that does not agree, ends the run with a
:class:`~fedstream.errors.ProtocolError` that says why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence

from fedstream.data.chfl_datasets import SPECS
from fedstream.deploy.chfl_data import chfl_config_settings
from fedstream.deploy.link import FINISH, ROUND, SETUP, Envelope, Failure, Link
from fedstream.deploy.remote import RemoteNodes
from fedstream.errors import FedstreamError, ProtocolError
from fedstream.hfl.messages import ModelUpdate
from fedstream.hfl.selection import Choice
from fedstream.hfl.splits import SettingError, n_common_features
from fedstream.hfl.trainer import RoundResult
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.tensors import decode_update, encode_update

SHARED_SIZES = ("n_rows", "n_classes", "n_features", "n_common", "n_test")  # every node must report the same
SIZES = (*SHARED_SIZES, "n_unique", "n_train", "n_val")


class RemoteCohort(RemoteNodes):
    """Client nodes 0..K-1 of a CHFL run behind ``link`` (see the module doc)."""

    def __init__(self, link: Link, config: dict, *, run_token: str):
        super().__init__(link)
        self.config, self.run_token = config, run_token
        self.settings = chfl_config_settings(config)
        K = self.settings.clients
        if link.n_clients != K:
            raise ProtocolError(f"the link reaches {link.n_clients} client nodes, hfl.clients = {K}")
        self.ledger = ByteLedger(K)
        self.nodes: dict[int, dict] = {}  # client -> what its node reported at setup
        self.reports: list[dict] = []  # the nodes' byte counts at the end
        self.lr_index = -1

    def _reply(self, m: int, reply: Envelope | Failure, kind: str, t: int) -> Envelope:
        if isinstance(reply, Failure):
            raise ProtocolError(reply.reason)
        if reply.kind != kind or reply.round != t:
            raise ProtocolError(f"expected a {kind!r} reply for round {t}, received a {reply.kind!r} reply for "
                                f"round {reply.round}")
        return reply

    # -- setup -----------------------------------------------------------------------------------
    def setup(self) -> dict:
        """Send every node the config; return the sizes they agree on (``n_common``, ``n_classes``,
        ``n_rows``, ...) and the feature split's indices (``common``, ``unique`` per client)."""
        K, s = self.settings.clients, self.settings
        info = {"config": json.dumps(self.config), "run": self.run_token}
        replies = self._exchange({m: Envelope(SETUP, 0, [], dict(info)) for m in sorted(self.link.available())})
        for m, reply in replies.items():
            try:
                self.nodes[m] = self._check_setup(m, self._reply(m, reply, SETUP, 0))
            except FedstreamError as exc:
                self.fault(m, 0, SETUP, str(exc))
        self.require_all(self.nodes, K, f"a CHFL run needs all hfl.clients = {K}")
        first = self.nodes[0]
        for m, got in self.nodes.items():
            diff = {k: (got[k], first[k]) for k in (*SHARED_SIZES, "common") if got[k] != first[k]}
            if diff:
                raise ProtocolError(f"client {m} reports {diff} (its value, client 0's): the nodes do not hold the "
                                    "same data set or settings")
        want_classes = SPECS[s.dataset].n_classes
        try:
            want_common = n_common_features(first["n_features"], K, s.common_ratio)
        except SettingError as exc:
            raise ProtocolError(f"the nodes report {first['n_features']} features: {exc}") from None
        if first["n_classes"] != want_classes or first["n_common"] != want_common:
            raise ProtocolError(f"the nodes report {first['n_classes']} classes and {first['n_common']} common features, "
                                f"expected {want_classes} and {want_common} for data.name = {s.dataset!r}")
        return {k: first[k] for k in SHARED_SIZES} | {"common": first["common"],
                                                      "unique": [self.nodes[m]["unique"] for m in range(K)]}

    def _check_setup(self, m: int, reply: Envelope) -> dict:
        info = reply.info
        if info.get("client") != m:
            raise ProtocolError(f"the node reports client {info.get('client')!r}, expected {m}")
        out = {}
        for key in SIZES:
            v = info.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ProtocolError(f"setup reply: {key!r} must be an integer >= 0, received {v!r}"[:300])
            out[key] = v
        if min(out["n_train"], out["n_val"], out["n_test"], out["n_common"], out["n_unique"]) == 0:
            raise ProtocolError(f"setup reply: the node holds no rows or no features of a kind: {out}")
        for key, n in (("common", out["n_common"]), ("unique", out["n_unique"])):
            v = info.get(key)
            if (not isinstance(v, list) or len(v) != n
                    or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < out["n_features"] for i in v)):
                raise ProtocolError(f"setup reply: {key!r} must list {n} column indices, received {v!r}"[:300])
            out[key] = v
        return out

    # -- the Cohort interface ----------------------------------------------------------------------
    def start(self, lr: float) -> None:
        """The next federation; the nodes build fresh clients at its first round request."""
        self.lr_index += 1
        if self.settings.lrs[self.lr_index] != lr:
            raise ProtocolError(f"federation {self.lr_index}: expected learning rate {self.settings.lrs[self.lr_index]}, "
                                f"asked for {lr}")

    def round(self, lr: float, t: int, models: Sequence[ModelUpdate] | None, *, validate: bool,
              epochs: int) -> RoundResult:
        sent: dict[int, ModelUpdate | None] = {}
        requests = {}
        reachable = self.link.available()
        for m in sorted(set(self.nodes) - reachable):
            self.fault(m, t, ROUND, "not sent: the node left, or is still busy with a request that timed out")
        for m in sorted(set(self.nodes) & reachable):
            parts = []
            if models is not None:
                sent[m] = models[m]
                data = encode_update(models[m])
                self.ledger.add(m, "down", len(data))
                parts.append(data)
            requests[m] = Envelope(ROUND, t, parts, {"lr_index": self.lr_index, "validate": validate, "epochs": epochs})
        out = RoundResult()
        ups: dict[int, ModelUpdate] = {}
        for m, reply in self._exchange(requests).items():
            try:
                val, update, size = self._check_round(m, self._reply(m, reply, ROUND, t), t, validate, epochs,
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
        if validate and not out.val:
            raise ProtocolError(f"round {t}: no client node answered validly (faults: "
                                f"{[f['reason'] for f in self.faults[-3:]]})")
        if epochs and models is not None and not out.updates:
            raise ProtocolError(f"round {t}: no client node sent a valid model update (faults: "
                                f"{[f['reason'] for f in self.faults[-3:]]})")
        return out

    def _check_round(self, m: int, reply: Envelope, t: int, validate: bool, epochs: int,
                     sent: ModelUpdate | None) -> tuple[float, ModelUpdate | None, int]:
        """Validate client m's reply to round t; return (best validation accuracy, update, its bytes)."""
        val = reply.info.get("val")
        if validate and (isinstance(val, bool) or not isinstance(val, (int, float)) or not 0.0 <= val <= 1.0):
            raise ProtocolError(f"expected info 'val': a validation accuracy in [0, 1], received {val!r}"[:300])
        want = 1 if epochs and sent is not None else 0
        if len(reply.parts) != want:
            raise ProtocolError(f"expected {want} model message(s), received {len(reply.parts)}")
        if not want:
            return float(val) if validate else math.nan, None, 0
        data = reply.parts[0]
        msg = decode_update(data)  # header, length and finite values
        if msg.client != m or msg.round != t:
            raise ProtocolError(f"expected client {m}'s model for round {t}, received client {msg.client}'s for "
                                f"round {msg.round}")
        n_train = self.nodes[m]["n_train"]
        if msg.n_samples != n_train:
            raise ProtocolError(f"the model says {msg.n_samples} samples, the node reported {n_train} train rows")
        want_shapes = [(k, v.shape) for k, v in sent.tensors.items()]
        got_shapes = [(k, v.shape) for k, v in msg.tensors.items()]
        if got_shapes != want_shapes:
            raise ProtocolError(f"the model's tensors {got_shapes} do not match the global common column "
                                f"{want_shapes}"[:500])
        return float(val) if validate else math.nan, msg, len(data)

    def test_choices(self, variants: Mapping[str, Callable[[str], bool]]) -> dict[str, list[Choice]]:
        """Each node scores its own choices on its test rows; only the numbers come back."""
        t = self.settings.rounds
        replies = self._exchange({m: Envelope(FINISH, t, [], {}) for m in sorted(set(self.nodes) & self.link.available())})
        picks: dict[int, dict[str, Choice]] = {}
        self.reports = []
        for m, reply in sorted(replies.items()):
            try:
                reply = self._reply(m, reply, FINISH, t)
                picks[m] = self._check_choices(reply, variants)
            except FedstreamError as exc:
                self.fault(m, t, FINISH, str(exc))
                continue
            counted = [self.ledger.up[m], self.ledger.down[m], self.ledger.messages[m]]
            theirs = [reply.info.get(k) for k in ("up", "down", "messages")]
            if theirs != counted and not any(f["client"] == m for f in self.faults):
                self.fault(m, t, FINISH, f"the node counted (up, down, messages) = {theirs}, the server {counted}")
            self.reports.append({"client": m, "up": theirs[0], "down": theirs[1], "messages": theirs[2],
                                 "server_counted": counted})
        if not picks:
            raise ProtocolError("no client node reported its choices (see faults)")
        return {name: [picks[m][name] for m in sorted(picks)] for name in variants}

    def _check_choices(self, reply: Envelope, variants: Mapping[str, Callable[[str], bool]]) -> dict[str, Choice]:
        try:
            raw = json.loads(reply.info.get("choices", ""))
        except (TypeError, ValueError) as exc:
            raise ProtocolError(f"info 'choices' is not JSON ({exc})"[:300]) from None
        if not isinstance(raw, dict) or set(raw) != set(variants):
            raise ProtocolError(f"expected choices for {sorted(variants)}, received "
                                f"{sorted(raw) if isinstance(raw, dict) else type(raw).__name__}"[:300])
        s, out = self.settings, {}
        for name, ch in raw.items():
            ok = (isinstance(ch, dict) and set(ch) == {"lr", "candidate", "round", "val_acc", "test_acc"}
                  and ch["lr"] in s.lrs and isinstance(ch["candidate"], str) and variants[name](ch["candidate"])
                  and not isinstance(ch["round"], bool) and isinstance(ch["round"], int) and 1 <= ch["round"] <= s.rounds
                  and all(isinstance(ch[k], (int, float)) and not isinstance(ch[k], bool) and 0.0 <= ch[k] <= 1.0
                          for k in ("val_acc", "test_acc")))
            if not ok:
                raise ProtocolError(f"variant {name!r}: malformed choice {ch!r}"[:300])
            out[name] = Choice(float(ch["lr"]), ch["candidate"], ch["round"], float(ch["val_acc"]),
                               float(ch["test_acc"]))
        return out
