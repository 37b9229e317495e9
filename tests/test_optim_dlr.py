"""DLR's O(d) running-sum update equals the plain window sum of l full gradients."""

import numpy as np
import pytest

from fedstream.models import MLP, LayerGrad
from fedstream.optim import DLR, OGD


def plain_dlr(params, grad_seq, *, lr, window, alpha):
    """The textbook update: keep the last l gradients (zeros when passive) and sum them."""
    params = [p.copy() for p in params]
    history = []
    W = sum(alpha**i for i in range(window))
    for grads in grad_seq:
        history.insert(0, [np.zeros_like(p) for p in params] if grads is None else grads)
        history = history[:window]
        if grads is None:
            continue
        for k, p in enumerate(params):
            p -= lr * sum(alpha**i * g[k] for i, g in enumerate(history)) / W
    return params


@pytest.mark.parametrize("defer", [False, True], ids=["running-sum", "deferred"])
@pytest.mark.parametrize("window,alpha", [(1, 0.9), (3, 0.95), (10, 0.95), (25, 0.5)])
def test_dlr_equals_plain_window(window, alpha, defer):
    rng = np.random.default_rng(window)
    model = MLP([6, 5, 3], relu_last=False, rng=rng)
    start = [p.astype(np.float64) for p in model.parameters()]
    for layer in model.layers:  # run the fast path in float64 so only the algorithm is compared
        layer.W, layer.b = layer.W.astype(np.float64), layer.b.astype(np.float64)
    opt = DLR(model, lr=0.1, window=window, alpha=alpha, defer=defer)
    assert opt.deferred_layers == ([0, 1] if defer else [])
    seq = []
    for t in range(4 * window + 7):
        if rng.random() < 0.3:  # passive round
            opt.skip()
            seq.append(None)
            continue
        grads = [
            LayerGrad(rng.normal(size=(1, l.W.shape[0])), rng.normal(size=(1, l.W.shape[1])))
            for l in model.layers
        ]
        opt.step(grads)
        dense = []
        for g in grads:
            dense += [g.weight(), g.bias()]
        seq.append(dense)
    expected = plain_dlr(start, seq, lr=0.1, window=window, alpha=alpha)
    for got, want in zip(model.parameters(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("defer", [False, True], ids=["running-sum", "deferred"])
def test_dlr_state_roundtrip_continues_identically(defer):
    rng = np.random.default_rng(0)
    a = MLP([4, 3], relu_last=True, rng=np.random.default_rng(1))
    b = MLP([4, 3], relu_last=True, rng=np.random.default_rng(2))  # restored below, from a's state
    oa, ob = (DLR(m, lr=0.1, window=4, alpha=0.9, defer=defer) for m in (a, b))
    grads = [
        [LayerGrad(rng.normal(size=(1, 3)).astype(np.float32), rng.normal(size=(1, 4)).astype(np.float32))]
        for _ in range(9)
    ]
    for g in grads[:5]:
        oa.step(g)
    for g in grads[2:4]:  # b's window and shares differ from a's before the restore
        ob.step(g)
    ob.load_state_dict(oa.state_dict())
    b.load_state_dict(a.state_dict())
    for g in grads[5:]:
        oa.step(g)
        ob.step(g)
    for pa, pb in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(pa, pb)


def test_ogd_is_plain_gradient_descent():
    model = MLP([3, 2], relu_last=False, rng=np.random.default_rng(0))
    W0, b0 = model.layers[0].W.copy(), model.layers[0].b.copy()
    g = LayerGrad(np.array([[1.0, -2.0]], np.float32), np.array([[0.5, 0.0, 1.0]], np.float32))
    OGD(model, lr=0.1).step([g])
    np.testing.assert_allclose(model.layers[0].W, W0 - 0.1 * g.weight(), rtol=1e-6)
    np.testing.assert_allclose(model.layers[0].b, b0 - 0.1 * g.bias(), rtol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(window=0, alpha=0.9), dict(window=3, alpha=1.5)])
def test_dlr_rejects_bad_hyperparameters(kwargs):
    from fedstream.errors import ConfigError

    with pytest.raises(ConfigError):
        DLR(MLP([2, 2], relu_last=False, rng=np.random.default_rng(0)), lr=0.1, **kwargs)


def test_dlr_auto_defers_big_layers_only():
    """The deferred way is picked where l (in + out) is small against in * out."""
    model = MLP([256, 256, 10], relu_last=False, rng=np.random.default_rng(0))
    assert DLR(model, lr=0.1, window=10, alpha=0.9).deferred_layers == [0]
    assert DLR(model, lr=0.1, window=150, alpha=0.9).deferred_layers == []


def test_deferred_forward_and_input_grad_use_the_effective_weight():
    """Forward and backward of a layer with deferred terms equal those of the dense W_eff."""
    rng = np.random.default_rng(3)
    model = MLP([7, 5, 4], relu_last=False, rng=rng)
    opt = DLR(model, lr=0.3, window=3, alpha=0.8, defer=True)
    for _ in range(5):
        _, acts = model.forward(rng.normal(size=(1, 7)).astype(np.float32))
        grads, _ = model.backward(acts, rng.normal(size=(1, 4)).astype(np.float32))
        opt.step(grads)
    dense = MLP([7, 5, 4], relu_last=False, rng=rng)
    for layer, eff in zip(dense.layers, model.layers):
        layer.W[...], layer.b[...] = eff.weight(), eff.b
    x = rng.normal(size=(2, 7)).astype(np.float32)
    g_out = rng.normal(size=(2, 4)).astype(np.float32)
    out, acts = model.forward(x)
    want, acts_d = dense.forward(x)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    _, g_in = model.backward(acts, g_out, need_input_grad=True)
    _, g_want = dense.backward(acts_d, g_out, need_input_grad=True)
    np.testing.assert_allclose(g_in, g_want, rtol=1e-5, atol=1e-6)


def test_a_second_dlr_on_the_same_model_keeps_the_pending_steps():
    rng = np.random.default_rng(5)
    model = MLP([6, 4], relu_last=False, rng=rng)
    opt = DLR(model, lr=0.2, window=4, alpha=0.9, defer=True)
    for _ in range(3):
        opt.step(
            [
                LayerGrad(
                    rng.normal(size=(1, 4)).astype(np.float32), rng.normal(size=(1, 6)).astype(np.float32)
                )
            ]
        )
    before = [p.copy() for p in model.parameters()]
    DLR(model, lr=0.2, window=4, alpha=0.9, defer=True)
    for got, want in zip(model.parameters(), before):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
