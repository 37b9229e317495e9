"""A horizontal-FL client: its data, its local networks, local training and evaluation.

What a client holds depends on the method (paper V-A2 and V-B5):

========  ======================  =============================================================
method    common column (FedAvg)  local heads (never sent)
========  ======================  =============================================================
common    yes                     none: the prediction is the common column's
fedprox   yes (proximal term)     none
chfl      yes                     one :class:`LateralColumn` per μ tried (eq. 6-7)
concat    yes                     one :class:`ConcatHead`
local     no                      one :class:`Column` over common + unique features
========  ======================  =============================================================

A chfl client can also score the Common and Concat baselines inside its own federation
(``shared``/``report_common``): their common column is the same network trained the same way.

One mini-batch of local training follows Algorithm 2: (line 14) a step of the local common
column θ_{c,k} on the common features alone, plus FedProx's proximal term when ρ > 0; then
(lines 15-16) with the just-updated θ_{c,k} fixed, one step of every head on the loss of its
own prediction. The heads of several μ share the common column's outputs and train side by
side: they do not interact (disjoint parameters, per-parameter Adam), so this is the same as
training one CHFL network per μ. The common column's Adam state starts afresh every round (its
weights are replaced by the global ones); the heads' Adam state persists.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedstream.chfl.fedavg import proximal_term
from fedstream.chfl.models import (
    Column,
    ConcatHead,
    LateralColumn,
    OwnHead,
    load_arrays,
    own_module,
    state_arrays,
)
from fedstream.metrics.collapse import top_share
from fedstream.transport.updates import ModelUpdate

EVAL_BATCH = 8192


class View(NamedTuple):
    """One split of a client's data: common features, unique features, labels."""

    xc: torch.Tensor
    xu: torch.Tensor
    y: torch.Tensor


class ClientData(NamedTuple):
    train: View
    val: View
    test: View
    # new rows of the run's feature space (n, d) -> this client's (xc, xu), standardised as its own
    encode: Callable[[np.ndarray], tuple[torch.Tensor, torch.Tensor]] | None = None


class ColumnEncoder:
    """Rows of the run's feature space as a client's (common, unique) float32 tensors, standardised by
    its training rows' ``mean`` and ``std``; a class rather than a closure, so that a fitted model
    pickles (scikit-learn's estimators are pickled by joblib and ``check_estimator``)."""

    def __init__(self, cols: np.ndarray, mean: np.ndarray, std: np.ndarray, n_common: int):
        self.cols, self.mean, self.std, self.n_common = cols, mean, std, n_common

    def __call__(self, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        Z = torch.from_numpy(((rows[:, self.cols] - self.mean) / self.std).astype(np.float32))
        return Z[:, :self.n_common].contiguous(), Z[:, self.n_common:].contiguous()


def make_client_data(X: np.ndarray, y: np.ndarray, common: np.ndarray, unique: np.ndarray,
                     train: np.ndarray, val: np.ndarray, test: np.ndarray) -> ClientData:
    """Slice the client's columns and rows, standardised with its own train mean/std (std 0 -> 1)."""
    cols = np.concatenate([common, unique])
    mean = X[np.ix_(train, cols)].mean(axis=0)
    std = X[np.ix_(train, cols)].std(axis=0)
    std = np.where(std > 0, std, 1.0)
    encode = ColumnEncoder(cols, mean, std, len(common))

    def view(rows: np.ndarray) -> View:
        return View(*encode(X[rows]), torch.from_numpy(y[rows]))

    return ClientData(view(train), view(val), view(test), encode)


def _adam(params: Sequence[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):  # a build without the fused CPU kernel
        return torch.optim.Adam(params, lr=lr)


def make_heads(method: str, d_common: int, d_unique: int, n_classes: int, hidden: Sequence[int],
               mus: Sequence[float], shared: Sequence[str] = (), *,
               generator: torch.Generator | None = None, own=None, client: int = 0) -> dict[str, nn.Module]:
    """The local heads of ``method`` (see the module table), keyed by candidate name.

    ``shared``: for chfl, ``concat`` adds the concat baseline's head beside the lateral ones.
    ``generator``: where the initial weights are drawn from (None: the global torch RNG).
    ``own``: the factory of ``model.client`` (:mod:`fedstream.own_models`): chfl's head is then
    :class:`OwnHead` at μ = 0 (``mu=0``), concat's its concat form, local's the module itself.
    """
    g = generator
    if own is not None:
        def net(d_in: int) -> nn.Module:
            return own_module(own, "model.client", f"client {client}", d_in, n_classes, g, client=client)
        if method == "chfl":
            heads = {"mu=0": OwnHead(net(d_unique))}
            if "concat" in shared:
                heads["concat"] = OwnHead(net(d_unique + n_classes), concat=True)
            return heads
        if method == "concat":
            return {"concat": OwnHead(net(d_unique + n_classes), concat=True)}
        if method == "local":
            return {"local": net(d_common + d_unique)}
        return {}
    if method == "chfl":
        heads: dict[str, nn.Module] = {
            f"mu={mu:g}": LateralColumn(d_unique, n_classes, hidden, mu=mu, generator=g) for mu in mus}
        if "concat" in shared:
            heads["concat"] = ConcatHead(d_unique, n_classes, hidden, generator=g)
        return heads
    if method == "concat":
        return {"concat": ConcatHead(d_unique, n_classes, hidden, generator=g)}
    if method == "local":
        return {"local": Column(d_common + d_unique, n_classes, hidden, generator=g)}
    return {}


class Client:
    """Client k: trains its local common column (if federated) and its heads; evaluates them."""

    def __init__(self, k: int, data: ClientData, *, common: Column | None,
                 heads: dict[str, nn.Module], lr: float, batch_size: int, prox_mu: float = 0.0,
                 seed: int = 0, report_common: bool = False, device: torch.device | None = None):
        # ``device``: where its models and rows live (fedstream.runs.device); updates leave as CPU arrays
        self.device = torch.device("cpu") if device is None else device
        if self.device.type != "cpu":
            data = ClientData(*(View(*(t.to(self.device) for t in v)) for v in data[:3]), data.encode)
            common = None if common is None else common.to(self.device)
            heads = {n: h.to(self.device) for n, h in heads.items()}
        self.k, self.data, self.common, self.heads = k, data, common, heads
        # the common column's own prediction is a candidate for Common/FedProx, and on request
        # alongside the heads (the Common baseline shares CHFL's common column: same training)
        self.report_common = common is not None and (report_common or not heads)
        self.lr, self.batch_size, self.prox_mu = lr, batch_size, prox_mu
        self.rng = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, k]).generate_state(1)[0]))
        params = [p for h in heads.values() for p in h.parameters()]
        self.opt_heads = _adam(params, lr) if params else None
        self.opt_common: torch.optim.Optimizer | None = None
        self.anchor: dict[str, torch.Tensor] = {}
        self.round = 0

    @property
    def n_train(self) -> int:
        return int(self.data.train.y.shape[0])

    def candidates(self) -> list[str]:
        """Names of the predictions this client scores: its heads, and ``common`` if reported."""
        return list(self.heads) + (["common"] if self.report_common else [])

    def receive(self, update: ModelUpdate) -> None:
        """Load the global common column θ_c^t (Algorithm 2, line 11)."""
        assert self.common is not None
        load_arrays(self.common, update.tensors)
        self.round = update.round
        self.opt_common = _adam(list(self.common.parameters()), self.lr)
        if self.prox_mu > 0:
            self.anchor = {k: v.detach().clone() for k, v in self.common.named_parameters()}

    def upload(self) -> ModelUpdate:
        """θ_{c,k}^t and the train sample count (Algorithm 2, line 19)."""
        assert self.common is not None
        return ModelUpdate(self.round, self.k, state_arrays(self.common), self.n_train)

    def train_epochs(self, epochs: int) -> None:
        """``epochs`` passes over the train rows in shuffled mini-batches (Algorithm 2, lines 12-18)."""
        xc, xu, y = self.data.train
        for _ in range(epochs):
            perm = torch.randperm(len(y), generator=self.rng)
            for s in range(0, len(y), self.batch_size):
                idx = perm[s:s + self.batch_size]
                self.step(xc[idx], xu[idx], y[idx])

    def step(self, xc: torch.Tensor, xu: torch.Tensor, y: torch.Tensor) -> None:
        """One mini-batch: the common column's own step, then every head's (Algorithm 2, 14-16)."""
        if self.common is not None:
            loss = F.cross_entropy(self.common(xc), y)
            if self.prox_mu > 0:
                loss = loss + proximal_term(self.common, self.anchor, self.prox_mu)
            self.opt_common.zero_grad(set_to_none=True)
            loss.backward()
            self.opt_common.step()
        if self.heads:
            loss = torch.stack([F.cross_entropy(o, y) for o in self._head_logits(xc, xu)]).sum()
            self.opt_heads.zero_grad(set_to_none=True)
            loss.backward()
            self.opt_heads.step()

    def _head_logits(self, xc: torch.Tensor, xu: torch.Tensor) -> list[torch.Tensor]:
        """Every head's logits; the common column runs without gradient (θ_c fixed, line 15)."""
        if self.common is None:
            x = torch.cat([xc, xu], dim=1)
            return [h(x) for h in self.heads.values()]
        with torch.no_grad():
            hs, logits = self.common.run(xc)
        return [h(xu, hs, logits) for h in self.heads.values()]

    def snapshot(self, candidate: str) -> dict[str, dict[str, torch.Tensor]]:
        """A copy of the head behind ``candidate`` (empty for ``common``).

        The common column is not copied: when candidates are scored it holds the global model
        θ^t just received, the same for every client, which the trainer keeps once per round.
        """
        if candidate in self.heads:
            return {"head": {k: v.clone() for k, v in self.heads[candidate].state_dict().items()}}
        return {}

    def restore(self, candidate: str, snap: dict[str, dict[str, torch.Tensor]],
                common: dict[str, np.ndarray] | None = None) -> None:
        """Load a :meth:`snapshot` of ``candidate`` back, and the global ``common`` column it was
        scored with (e.g. to score it on the test rows)."""
        if common is not None:
            load_arrays(self.common, common)
        if "head" in snap:
            self.heads[candidate].load_state_dict(snap["head"])

    def state(self) -> dict:
        """Everything training changes: columns, heads, Adam states, the shuffling generator.

        For a checkpoint (:mod:`fedstream.chfl.checkpoint`); tensors are the live ones, so save
        before training on.
        """
        return {
            "rng": self.rng.get_state(), "round": self.round,
            "common": self.common.state_dict() if self.common is not None else None,
            "opt_common": self.opt_common.state_dict() if self.opt_common is not None else None,
            "anchor": dict(self.anchor),
            "heads": {n: h.state_dict() for n, h in self.heads.items()},
            "opt_heads": self.opt_heads.state_dict() if self.opt_heads is not None else None,
        }

    def load_state(self, state: dict) -> None:
        """Put back a :meth:`state`; the client then trains on exactly as it would have."""
        self.rng.set_state(state["rng"])
        self.round = int(state["round"])
        if state["common"] is not None:
            self.common.load_state_dict(state["common"])
        if state["opt_common"] is not None:
            self.opt_common = _adam(list(self.common.parameters()), self.lr)
            self.opt_common.load_state_dict(state["opt_common"])
        self.anchor = {k: v.clone() for k, v in state["anchor"].items()}
        for n, h in self.heads.items():
            h.load_state_dict(state["heads"][n])
        if state["opt_heads"] is not None:
            self.opt_heads.load_state_dict(state["opt_heads"])

    @torch.no_grad()
    def predict(self, xc: torch.Tensor, xu: torch.Tensor, names: Sequence[str]) -> dict[str, torch.Tensor]:
        """Logits of the named candidates (heads, or ``common``: the common column alone)."""
        xc, xu = xc.to(self.device), xu.to(self.device)
        if self.common is None:
            x = torch.cat([xc, xu], dim=1)
            return {n: self.heads[n](x) for n in names}
        hs, logits = self.common.run(xc)
        return {n: logits if n == "common" else self.heads[n](xu, hs, logits) for n in names}

    @torch.no_grad()
    def accuracy(self, split: str, only: Sequence[str] | None = None) -> dict[str, float]:
        """Accuracy of every candidate (or those in ``only``) on ``split`` (train, val or test)."""
        xc, xu, y = getattr(self.data, split)
        names = [n for n in self.candidates() if only is None or n in only]
        correct = dict.fromkeys(names, 0)
        for s in range(0, len(y), EVAL_BATCH):
            b = slice(s, s + EVAL_BATCH)
            for name, o in self.predict(xc[b], xu[b], names).items():
                correct[name] += int((o.argmax(1) == y[b]).sum())
        return {name: c / len(y) for name, c in correct.items()}

    @torch.no_grad()
    def class_shares(self, split: str, candidate: str) -> tuple[float, float]:
        """On ``split``: the share of ``candidate``'s predictions that go to its most-predicted
        class, and of the labels to the most frequent one (:mod:`fedstream.metrics.collapse`)."""
        xc, xu, y = getattr(self.data, split)
        predicted = [self.predict(xc[b], xu[b], [candidate])[candidate].argmax(1)
                     for b in (slice(s, s + EVAL_BATCH) for s in range(0, len(y), EVAL_BATCH))]
        guesses = torch.cat(predicted).cpu().numpy() if predicted else np.zeros(0, np.int64)
        return top_share(guesses), top_share(np.asarray(y.cpu() if hasattr(y, "cpu") else y))
