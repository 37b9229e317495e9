"""CHFL networks: lateral connections (eq. 6), output aggregation (eq. 7), μ = 0, the concat head."""

import numpy as np
import pytest
import torch

from fedstream.chfl.client import Client, ClientData, View, make_heads
from fedstream.chfl.models import (
    CHFLNet,
    Column,
    ConcatHead,
    LateralColumn,
    load_arrays,
    state_arrays,
)
from fedstream.transport.updates import ModelUpdate

H = (12, 8, 6)


def inputs(n=5, dc=4, du=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, dc, generator=g), torch.randn(n, du, generator=g)


def test_mu_zero_equals_two_independent_columns():
    torch.manual_seed(0)
    net = CHFLNet(4, 3, 5, H, mu=0.0)
    assert len(net.unique.laterals) == 0  # μ = 0: no lateral matrices at all
    alone = Column(3, 5, H)
    alone.load_state_dict(net.unique.column.state_dict())
    xc, xu = inputs()
    expected = net.common(xc) + alone(xu)  # eq. 7 with two unconnected columns
    torch.testing.assert_close(net(xc, xu), expected)


def manual_forward(net: CHFLNet, xc: torch.Tensor, xu: torch.Tensor) -> torch.Tensor:
    """Eq. 6 and 7 written out with explicit matrices."""
    Wc = [(l.weight, l.bias) for l in net.common.layers]
    Wu = [(l.weight, l.bias) for l in net.unique.column.layers]
    U = [l.weight for l in net.unique.laterals]
    mu = net.unique.mu
    zc = [xc]
    for i, (W, b) in enumerate(Wc):
        a = zc[-1] @ W.T + b
        zc.append(a if i == len(Wc) - 1 else torch.relu(a))
    zu = torch.relu(xu @ Wu[0][0].T + Wu[0][1])
    for i in range(1, len(Wu)):
        a = zu @ Wu[i][0].T + Wu[i][1] + mu * zc[i] @ U[i - 1].T
        zu = a if i == len(Wu) - 1 else torch.relu(a)
    return zc[-1] + zu


@pytest.mark.parametrize("mu", [0.3, 1.0])
def test_lateral_forward_matches_equations(mu):
    torch.manual_seed(1)
    net = CHFLNet(4, 3, 5, H, mu=mu)
    assert [tuple(l.weight.shape) for l in net.unique.laterals] == [(8, 12), (6, 8), (5, 6)]
    xc, xu = inputs(seed=2)
    torch.testing.assert_close(net(xc, xu), manual_forward(net, xc, xu))


def test_mu_scales_the_lateral_contribution():
    torch.manual_seed(3)
    full = CHFLNet(4, 3, 5, H, mu=1.0)
    half = CHFLNet(4, 3, 5, H, mu=0.5)
    half.load_state_dict(full.state_dict())
    xc, xu = inputs(seed=4)
    hs, _ = full.common.run(xc)
    assert not torch.allclose(full(xc, xu), half(xc, xu))
    for l in half.unique.laterals:  # μ U with U doubled equals the μ = 1 network
        l.weight.data *= 2
    torch.testing.assert_close(full(xc, xu), half(xc, xu))


def test_mu_out_of_range():
    with pytest.raises(ValueError, match=r"mu: expected a number in \[0, 1\], found 1.5"):
        LateralColumn(3, 5, H, mu=1.5)


def test_concat_head_reads_unique_features_and_common_softmax():
    torch.manual_seed(5)
    head = ConcatHead(3, 5, H)
    xu = torch.randn(4, 3)
    logits = torch.randn(4, 5)
    expected = head.column(torch.cat([xu, torch.softmax(logits, 1)], 1))
    torch.testing.assert_close(head(xu, [], logits), expected)
    torch.testing.assert_close(head(xu, [], logits + 7.0), expected)  # softmax is shift-invariant


def client_data(seed=0, n=64):
    g = torch.Generator().manual_seed(seed)
    v = View(
        torch.randn(n, 4, generator=g), torch.randn(n, 3, generator=g), torch.randint(0, 5, (n,), generator=g)
    )
    return ClientData(v, v, v)


def make_client(method, seed=0):
    torch.manual_seed(seed)
    common = Column(4, 5, H)
    c = Client(0, client_data(), common=common, heads=make_heads(method, 4, 3, 5, H, (0.0, 0.5)),
               lr=1e-2, batch_size=16, seed=7)
    c.receive(ModelUpdate(0, 0, state_arrays(common), 0))
    return c


def test_heads_do_not_interfere_with_the_common_column():
    """Algorithm 2: θ_c trains on its own loss only, so CHFL's common column = Common's."""
    plain, chfl = make_client("common"), make_client("chfl")
    before = {k: v.clone() for k, v in chfl.heads["mu=0.5"].state_dict().items()}
    plain.train_epochs(2)
    chfl.train_epochs(2)
    for (k, a), b in zip(plain.common.state_dict().items(), chfl.common.state_dict().values()):
        torch.testing.assert_close(a, b, msg=k)
    after = chfl.heads["mu=0.5"].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the heads did learn


def test_state_arrays_round_trip():
    torch.manual_seed(6)
    a, b = Column(4, 5, H), Column(4, 5, H)
    arrays = state_arrays(a)
    assert all(v.dtype == np.float32 for v in arrays.values())
    load_arrays(b, arrays)
    x = torch.randn(3, 4)
    torch.testing.assert_close(a(x), b(x))
