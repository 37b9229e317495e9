"""FedAvg aggregation (weighted by sample counts), the FedAvg server, and FedProx's proximal term.

FedAvg (McMahan et al. 2017; paper eq. 1 and Algorithm 1): θ^{t+1} = Σ_k n_k θ_k^t / Σ_k n_k.
The paper writes the plain mean (1/K) Σ_k θ_k^t because its clients hold equal numbers of
samples; weighting by n_k is the general rule and equals the plain mean for equal counts.

FedProx (Li et al. 2020, cited as [9]): the same rounds, with the local objective changed to
L(θ) + (ρ/2) ||θ - θ^t||², θ^t the global model received this round. ρ = 0 is FedAvg.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from fedstream.errors import ProtocolError
from fedstream.transport.updates import ModelUpdate


def fedavg(updates: Sequence[ModelUpdate]) -> dict[str, np.ndarray]:
    """Average the updates' tensors, weighting update k by its ``n_samples``.

    Raises ProtocolError when there is no update, a count is zero, or the updates disagree on
    tensor names or shapes.
    """
    if not updates:
        raise ProtocolError("FedAvg: expected at least one model update, received none")
    ref = updates[0].tensors
    total = sum(int(u.n_samples) for u in updates)
    for u in updates:
        if u.n_samples <= 0:
            raise ProtocolError(f"FedAvg: client {u.client}: expected n_samples > 0, found {u.n_samples}")
        if list(u.tensors) != list(ref):
            raise ProtocolError(f"FedAvg: client {u.client} sent tensors {sorted(u.tensors)}, "
                                f"expected {sorted(ref)}")
        for name, t in u.tensors.items():
            if t.shape != ref[name].shape:
                raise ProtocolError(f"FedAvg: client {u.client}: tensor {name!r} has shape {t.shape}, "
                                    f"expected {ref[name].shape}")
    out: dict[str, np.ndarray] = {}
    for name in ref:
        acc = np.zeros(ref[name].shape, dtype=np.float64)
        for u in updates:
            acc += (u.n_samples / total) * u.tensors[name]
        out[name] = acc.astype(np.float32)
    return out


class FedAvgServer:
    """Holds the global model; broadcasts it and replaces it by the FedAvg of the replies."""

    def __init__(self, initial: Mapping[str, np.ndarray]):
        self.state = {k: np.asarray(v, dtype=np.float32).copy() for k, v in initial.items()}
        self.round = 0

    def broadcast(self, clients: Sequence[int]) -> list[ModelUpdate]:
        """One message per client carrying θ^t (n_samples: 0, the server trained on nothing)."""
        return [ModelUpdate(self.round, k, self.state, 0) for k in clients]

    def aggregate(self, updates: Sequence[ModelUpdate]) -> None:
        """θ^{t+1} <- FedAvg of the round's updates; every update must be for this round."""
        for u in updates:
            if u.round != self.round:
                raise ProtocolError(f"FedAvg round {self.round}: client {u.client} sent an update "
                                    f"for round {u.round}")
        self.state = fedavg(updates)
        self.round += 1

    def carry_over(self) -> None:
        """A round in which no client's update arrived (a deployed run whose nodes all failed it):
        θ^{t+1} <- θ^t, and the next round begins."""
        self.round += 1


def try_carry_over(server: FedAvgServer, carried: list, this: object, before: object, *, only: bool) -> bool:
    """A round that brought no client's update (every node of a deployed run failed it, each one's
    fault): θ carries over (:meth:`FedAvgServer.carry_over`) and ``this`` round is recorded in
    ``carried``; True. Once is a lost reply; when the round ``before`` it was carried over too, or it
    is the run's ``only`` one, the run cannot learn: False, nothing changed (the caller stops)."""
    if before in carried or only:
        return False
    server.carry_over()
    carried.append(this)
    return True


def proximal_term(module: torch.nn.Module, anchor: Mapping[str, torch.Tensor], rho: float) -> torch.Tensor:
    """FedProx's (ρ/2) Σ ||w - w^t||² over the module's parameters, w^t the received global ones."""
    total = torch.zeros(())
    for name, p in module.named_parameters():
        total = total + (p - anchor[name]).pow(2).sum()
    return 0.5 * rho * total
