"""The networks of CHFL and its baselines (torch).

* :class:`Column`: a ReLU MLP d -> 512 -> 256 -> 128 -> C (paper V-A2); the common column, the
  Common and Local baselines' network, and (with unique features as input) a unique column.
* :class:`LateralColumn`: the unique column of CHFL (section IV-B). Its layer i+1 also receives
  the common column's layer-i output through a lateral matrix U^(i+1) scaled by μ (eq. 6):
  ``z_u^(i+1) = a(W z_u^(i) + b + μ U z_c^(i))``, for i = 1..L-1, the last one feeding the
  output layer (no activation there). μ = 0 builds no lateral matrices at all.
* Output aggregation (eq. 7): the prediction is softmax(z_c^(L) + z_u^(L)); the modules return
  logits, the softmax being inside the cross-entropy.
* :class:`ConcatHead`: the simple method of section V-B5, a column over the unique features
  concatenated with the common network's output F_θc(x_c) = softmax(z_c^(L)); its own output is
  the prediction (no lateral connections, no aggregation).

Every module takes an optional ``generator``: given one, its weights are drawn from it (PyTorch's
default ``nn.Linear`` initialisation, same distribution) and the global torch RNG is not touched,
so runs that share a process neither disturb each other nor depend on what ran before.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from fedstream.errors import ProtocolError

HIDDEN = (512, 256, 128)


def linear(
    d_in: int, d_out: int, *, bias: bool = True, generator: torch.Generator | None = None
) -> nn.Linear:
    """``nn.Linear(d_in, d_out)`` initialised as PyTorch does, from ``generator`` if given.

    With a generator the layer is built on the meta device (no draw from the global RNG), then
    materialised and initialised from the generator: kaiming-uniform weights (a = sqrt(5)) and
    uniform(±1/sqrt(d_in)) biases, the distribution of ``nn.Linear.reset_parameters``.
    """
    if generator is None:
        return nn.Linear(d_in, d_out, bias=bias)
    layer = nn.Linear(d_in, d_out, bias=bias, device="meta").to_empty(device="cpu")
    with torch.no_grad():
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        if bias:
            bound = 1.0 / math.sqrt(d_in) if d_in > 0 else 0.0
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return layer


class Column(nn.Module):
    """ReLU MLP ``d_in -> hidden... -> n_classes``; :meth:`run` also returns the hidden outputs."""

    def __init__(self, d_in: int, n_classes: int, hidden: Sequence[int] = HIDDEN, *,
                 generator: torch.Generator | None = None):
        super().__init__()
        sizes = [d_in, *hidden, n_classes]
        self.layers = nn.ModuleList(linear(a, b, generator=generator) for a, b in itertools.pairwise(sizes))

    def run(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """(hidden outputs z^(1..L-1), logits z^(L))."""
        hs: list[torch.Tensor] = []
        for layer in self.layers[:-1]:
            x = torch.relu(layer(x))
            hs.append(x)
        return hs, self.layers[-1](x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x)[1]


class LateralColumn(nn.Module):
    """CHFL's unique column: eq. 6 lateral inputs scaled by a fixed μ in [0, 1], eq. 7 output sum.

    ``forward(x_u, common_hidden, common_logits)`` returns z_c^(L) + z_u^(L). The common column's
    outputs are taken as given: Algorithm 2 trains θ_u and U with θ_c fixed, so callers pass them
    detached.
    """

    def __init__(self, d_in: int, n_classes: int, hidden: Sequence[int] = HIDDEN, *, mu: float = 1.0,
                 generator: torch.Generator | None = None):
        super().__init__()
        if not 0.0 <= mu <= 1.0:
            raise ValueError(f"mu: expected a number in [0, 1], found {mu}")
        self.mu = float(mu)
        self.column = Column(d_in, n_classes, hidden, generator=generator)
        outs = [*hidden[1:], n_classes]  # U^(i+1): n_i -> n_{i+1}, i = 1..L-1
        self.laterals = (
            nn.ModuleList(linear(a, b, bias=False, generator=generator) for a, b in zip(hidden, outs))
            if mu > 0
            else nn.ModuleList()
        )

    def unique_logits(self, x_u: torch.Tensor, common_hidden: Sequence[torch.Tensor]) -> torch.Tensor:
        """z_u^(L) by eq. 6."""
        layers = self.column.layers
        z = torch.relu(layers[0](x_u))
        for i in range(1, len(layers)):
            pre = layers[i](z)
            if self.laterals:
                pre = pre + self.mu * self.laterals[i - 1](common_hidden[i - 1])
            z = pre if i == len(layers) - 1 else torch.relu(pre)
        return z

    def forward(self, x_u: torch.Tensor, common_hidden: Sequence[torch.Tensor],
                common_logits: torch.Tensor) -> torch.Tensor:
        return common_logits + self.unique_logits(x_u, common_hidden)


class ConcatHead(nn.Module):
    """Section V-B5: a column over [x_u, softmax(z_c^(L))]; its logits are the prediction."""

    def __init__(self, d_unique: int, n_classes: int, hidden: Sequence[int] = HIDDEN, *,
                 generator: torch.Generator | None = None):
        super().__init__()
        self.column = Column(d_unique + n_classes, n_classes, hidden, generator=generator)

    def forward(self, x_u: torch.Tensor, common_hidden: Sequence[torch.Tensor],
                common_logits: torch.Tensor) -> torch.Tensor:
        return self.column(torch.cat([x_u, torch.softmax(common_logits, dim=1)], dim=1))


class CHFLNet(nn.Module):
    """One client's whole CHFL network Θ_k = (θ_c, θ_u,k, U_k): F(x_c, x_u) before the softmax."""

    def __init__(self, d_common: int, d_unique: int, n_classes: int,
                 hidden: Sequence[int] = HIDDEN, *, mu: float = 1.0):
        super().__init__()
        self.common = Column(d_common, n_classes, hidden)
        self.unique = LateralColumn(d_unique, n_classes, hidden, mu=mu)

    def forward(self, x_c: torch.Tensor, x_u: torch.Tensor) -> torch.Tensor:
        hs, logits = self.common.run(x_c)
        return self.unique(x_u, hs, logits)


def state_arrays(module: nn.Module) -> dict[str, np.ndarray]:
    """The module's parameters as float32 numpy arrays (copies), keyed by parameter name."""
    return {k: v.detach().cpu().numpy().astype(np.float32, copy=True) for k, v in module.state_dict().items()}


def load_arrays(module: nn.Module, arrays: Mapping[str, np.ndarray]) -> None:
    """Copy named arrays (e.g. a decoded ModelUpdate) into the module's parameters."""
    own = module.state_dict()
    if arrays.keys() != own.keys() or any(np.shape(v) != tuple(own[k].shape) for k, v in arrays.items()):
        got = {k: np.shape(v) for k, v in arrays.items()}
        want = {k: tuple(v.shape) for k, v in own.items()}
        raise ProtocolError(f"a model update of tensors {got} does not fit this column's {want}")
    module.load_state_dict({k: torch.from_numpy(v) for k, v in arrays.items()}, strict=True)


class OwnColumn(nn.Module):
    """A user's module (``model.server``, :mod:`fedstream.own_models`) as the common column: its
    logits, and no hidden outputs for lateral connections (the heads over it use μ = 0)."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def run(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        return [], self.net(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class OwnHead(nn.Module):
    """A user's unique column (``model.client``) as a local head: eq. 7's output sum z_c + z_u without
    lateral connections (CHFL at μ = 0), or with ``concat`` section V-B5's column over
    [x_u, softmax(z_c)]."""

    def __init__(self, net: nn.Module, *, concat: bool = False):
        super().__init__()
        self.net, self.concat = net, concat

    def forward(self, x_u: torch.Tensor, common_hidden: Sequence[torch.Tensor],
                common_logits: torch.Tensor) -> torch.Tensor:
        if self.concat:
            return self.net(torch.cat([x_u, torch.softmax(common_logits, dim=1)], dim=1))
        return common_logits + self.net(x_u)


def own_module(spec, key: str, party: str, d_in: int, n_classes: int, generator: torch.Generator | None,
               **extra) -> nn.Module:
    """The factory ``spec``'s module over ``d_in`` features to ``n_classes`` logits, its weights drawn
    from the global torch RNG seeded by one draw of ``generator`` (put back after), its output checked."""
    from fedstream.own_models import build, check_output

    seed = int(torch.randint(0, 2**62, (1,), generator=generator)) if generator is not None else None
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        net = build(spec, key, party, input_size=d_in, n_classes=n_classes, **extra)
    check_output(net, spec, key, party, (d_in,), (n_classes,), f"(rows, classes) with {n_classes} classes")
    return net


def common_column(spec, d_common: int, n_classes: int, hidden: Sequence[int], *,
                  generator: torch.Generator | None = None, party: str = "server") -> nn.Module:
    """The common column: :class:`Column`, or the factory ``spec`` (``model.server``) as an
    :class:`OwnColumn`."""
    if spec is None:
        return Column(d_common, n_classes, hidden, generator=generator)
    return OwnColumn(own_module(spec, "model.server", party, d_common, n_classes, generator))

