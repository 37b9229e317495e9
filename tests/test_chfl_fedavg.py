"""FedAvg (weighted by sample counts), the FedAvg server, FedProx's proximal term."""

import numpy as np
import pytest
import torch

from fedstream.chfl.fedavg import FedAvgServer, fedavg, proximal_term
from fedstream.errors import ProtocolError
from fedstream.transport.updates import ModelUpdate


def upd(k, w, n, rnd=0):
    return ModelUpdate(rnd, k, {"w": np.asarray(w, np.float32), "b": np.asarray([k], np.float32)}, n)


def test_weighted_by_sample_counts():
    out = fedavg([upd(0, [[1.0, 2.0]], 100), upd(1, [[4.0, -1.0]], 300)])
    np.testing.assert_allclose(out["w"], [[0.25 * 1 + 0.75 * 4, 0.25 * 2 - 0.75]], rtol=1e-6)
    np.testing.assert_allclose(out["b"], [0.75])
    assert out["w"].dtype == np.float32


def test_equal_counts_give_the_plain_mean():
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((3, 4)) for _ in range(5)]
    out = fedavg([upd(k, w, 17) for k, w in enumerate(ws)])
    np.testing.assert_allclose(out["w"], np.mean(ws, axis=0), rtol=1e-5, atol=1e-6)  # eq. (1)


@pytest.mark.parametrize(
    "updates,match",
    [
        ([], "expected at least one model update"),
        ([upd(0, [1.0], 5), upd(1, [1.0], 0)], r"client 1: expected n_samples > 0, found 0"),
        (
            [upd(0, [1.0], 5), upd(1, [1.0, 2.0], 5)],
            r"client 1: tensor 'w' has shape \(2,\), expected \(1,\)",
        ),
        (
            [upd(0, [1.0], 5), ModelUpdate(0, 1, {"v": np.ones(1, np.float32)}, 5)],
            r"client 1 sent tensors \['v'\], expected \['b', 'w'\]",
        ),
    ],
)
def test_rejects_inconsistent_updates(updates, match):
    with pytest.raises(ProtocolError, match=match):
        fedavg(updates)


def test_server_rounds():
    server = FedAvgServer({"w": np.zeros(2), "b": np.zeros(1)})
    msgs = server.broadcast([0, 2])
    assert [m.client for m in msgs] == [0, 2] and all(m.round == 0 for m in msgs)
    server.aggregate([upd(0, [2.0, 2.0], 1), upd(2, [4.0, 0.0], 1)])
    assert server.round == 1
    np.testing.assert_allclose(server.state["w"], [3.0, 1.0])
    with pytest.raises(ProtocolError, match=r"FedAvg round 1: client 0 sent an update for round 0"):
        server.aggregate([upd(0, [1.0, 1.0], 1, rnd=0)])


def test_proximal_term_value_and_gradient():
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    anchor = {k: v.detach() + 0.5 for k, v in m.named_parameters()}
    rho = 0.2
    term = proximal_term(m, anchor, rho)
    n = sum(p.numel() for p in m.parameters())
    assert float(term.detach()) == pytest.approx(0.5 * rho * 0.25 * n)
    term.backward()
    for name, p in m.named_parameters():  # d/dw (ρ/2)||w - w^t||² = ρ (w - w^t)
        torch.testing.assert_close(p.grad, rho * (p.detach() - anchor[name]))
