"""Contract checks over every optimiser and optimiser stack (the :class:`fedstream.seams.Optimiser`
and ``OptimiserStack`` seams).

Registry: one line per optimiser configuration. Checks: it satisfies the Protocol; n steps (some
of them passive), state saved, loaded into a freshly built model and optimiser, m more steps give
bit for bit the model and state of n + m steps uninterrupted; a stack of K runs' optimisers gives
each run what it gets alone, and a stack built from resumed optimisers continues them; invalid
settings raise ``ConfigError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from fedstream.errors import ConfigError, FedstreamError
from fedstream.models import MLP
from fedstream.models.stack import MLPStack
from fedstream.optim import DLR, OGD, make_optimizer
from fedstream.optim.stack import make_optimizer_stack
from fedstream.seams import Optimiser, OptimiserStack, Stateful

SIZES = [5, 7, 3]


@dataclass
class OptimiserCase:
    name: str
    make: Callable[[MLP, float], Optimiser]  # (model, learning rate)
    rows: int = 1  # gradient rows per step (SLR: the window)


OPTIMISERS = [
    OptimiserCase("ogd", lambda m, lr: OGD(m, lr=lr)),
    OptimiserCase("slr", lambda m, lr: make_optimizer("slr", m, lr=lr, window=4, alpha=0.9), rows=4),
    OptimiserCase("dlr-running", lambda m, lr: DLR(m, lr=lr, window=3, alpha=0.8, defer=False)),
    OptimiserCase("dlr-deferred", lambda m, lr: DLR(m, lr=lr, window=3, alpha=0.8, defer=True)),
    OptimiserCase("dlr-auto", lambda m, lr: make_optimizer("dlr", m, lr=lr, window=2, alpha=0.5)),
    OptimiserCase("dlr-window-1", lambda m, lr: DLR(m, lr=lr, window=1, alpha=0.5, defer=True)),
]
IDS = [c.name for c in OPTIMISERS]


def _model(seed: int) -> MLP:
    return MLP(SIZES, relu_last=False, rng=np.random.default_rng(seed))


def _steps(model: MLP, opt, rounds: range, rows: int) -> None:
    """Forward, backward and step on a fixed input and output gradient per round; every third
    round is passive (``skip``)."""
    for t in rounds:
        rng = np.random.default_rng([7, t])
        if t % 3 == 2:
            opt.skip()
            continue
        _, acts = model.forward(rng.normal(size=(rows, SIZES[0])).astype(np.float32))
        grads, _ = model.backward(acts, rng.normal(size=(rows, SIZES[-1])).astype(np.float32))
        opt.step(grads)


def _snapshot(model: MLP, opt) -> dict[str, np.ndarray]:
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    state |= {f"eff{i}": p.copy() for i, p in enumerate(model.parameters())}  # deferred terms applied
    return state | {f"optim.{k}": np.asarray(v).copy() for k, v in opt.state_dict().items()}


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("case", OPTIMISERS, ids=IDS)
def test_optimiser_satisfies_the_protocol(case):
    opt = case.make(_model(0), 0.1)
    assert isinstance(opt, Optimiser) and isinstance(opt, Stateful)
    assert opt.lr > 0 and isinstance(opt.name, str)


@pytest.mark.parametrize("case", OPTIMISERS, ids=IDS)
def test_state_save_load_equals_continuing(case):
    n, m = 7, 8
    model = _model(0)
    opt = case.make(model, 0.1)
    _steps(model, opt, range(n + m), case.rows)
    whole = _snapshot(model, opt)

    model = _model(0)
    opt = case.make(model, 0.1)
    _steps(model, opt, range(n), case.rows)
    model_state, opt_state = model.state_dict(), opt.state_dict()
    _steps(model, opt, range(n, n + 2), case.rows)  # training on must not change the saved state

    fresh = _model(1)  # other weights: everything must come from the state
    fresh_opt = case.make(fresh, 0.1)
    fresh.load_state_dict(model_state)
    fresh_opt.load_state_dict(opt_state)
    _steps(fresh, fresh_opt, range(n, n + m), case.rows)
    _assert_same(whole, _snapshot(fresh, fresh_opt))


@pytest.mark.parametrize("case", OPTIMISERS, ids=IDS)
def test_same_gradients_same_parameters(case):
    runs = []
    for _ in range(2):
        model = _model(3)
        opt = case.make(model, 0.1)
        _steps(model, opt, range(6), case.rows)
        runs.append(_snapshot(model, opt))
    _assert_same(*runs)


@pytest.mark.parametrize("bad", [
    lambda m: OGD(m, lr=0.0),
    lambda m: OGD(m, lr=float("nan")),
    lambda m: OGD(m, lr=float("inf")),
    lambda m: DLR(m, lr=0.1, window=0, alpha=0.5),
    lambda m: DLR(m, lr=0.1, window=2.0, alpha=0.5),
    lambda m: DLR(m, lr=0.1, window=2, alpha=1.0),
    lambda m: DLR(m, lr=0.1, window=2, alpha=0.5, defer="sometimes"),
    lambda m: DLR(m, lr=-1, window=2, alpha=0.5),
])
def test_bad_settings_raise_config_error(bad):
    with pytest.raises(ConfigError):
        bad(_model(0))


def test_dlr_state_of_another_layout_raises_config_error():
    saved = DLR(_model(0), lr=0.1, window=3, alpha=0.8, defer=True).state_dict()
    with pytest.raises(ConfigError):
        DLR(_model(0), lr=0.1, window=3, alpha=0.8, defer=False).load_state_dict(saved)


def test_unknown_optimiser_name_raises_config_error():
    with pytest.raises(ConfigError):
        make_optimizer("adam", _model(0), lr=0.1, window=1, alpha=0.5)


# --- stacks of K runs ------------------------------------------------------------------------------
K = 3
LRS = [0.1, 0.05, 0.2]
STACKS = [c for c in OPTIMISERS if c.rows == 1]  # a stack steps one-sample gradients


def _active(t: int) -> np.ndarray:
    return np.array([(t + k) % 3 != 0 for k in range(K)])


def _alone(models, opts, rounds: range) -> None:
    for t in rounds:
        rng = np.random.default_rng([9, t])
        x = rng.normal(size=(1, SIZES[0])).astype(np.float32)
        g = rng.normal(size=(K, 1, SIZES[-1])).astype(np.float32)
        for k, (model, opt) in enumerate(zip(models, opts)):
            if _active(t)[k]:
                _, acts = model.forward(x)
                opt.step(model.backward(acts, g[k])[0])
            else:
                opt.skip()


def _stacked(stack_model: MLPStack, stack, rounds: range) -> None:
    for t in rounds:
        rng = np.random.default_rng([9, t])
        x = rng.normal(size=(1, 1, SIZES[0])).astype(np.float32)
        g = rng.normal(size=(K, 1, SIZES[-1])).astype(np.float32)
        active = _active(t)
        _, acts = stack_model.forward(x)
        grads, _ = stack_model.backward(acts, g, np.flatnonzero(active))
        stack.step(grads, active)


@pytest.mark.parametrize("case", STACKS, ids=[c.name for c in STACKS])
def test_stack_equals_runs_alone_and_resumes(case):
    n, m = 5, 6
    models = [_model(10 + k) for k in range(K)]
    opts = [case.make(mod, lr) for mod, lr in zip(models, LRS)]
    _alone(models, opts, range(n + m))
    alone = [_snapshot(mod, o) for mod, o in zip(models, opts)]

    models = [_model(10 + k) for k in range(K)]
    opts = [case.make(mod, lr) for mod, lr in zip(models, LRS)]
    _alone(models, opts, range(n))  # then resume, stacked, from the runs' saved states
    resumed = [_model(20 + k) for k in range(K)]
    resumed_opts = [case.make(mod, lr) for mod, lr in zip(resumed, LRS)]
    for src, src_opt, dst, dst_opt in zip(models, opts, resumed, resumed_opts):
        dst.load_state_dict(src.state_dict())
        dst_opt.load_state_dict(src_opt.state_dict())
    stack_model = MLPStack(resumed)
    stack = make_optimizer_stack(stack_model, resumed_opts)
    assert isinstance(stack, OptimiserStack)
    _stacked(stack_model, stack, range(n, n + m))
    stack_model.write_back(resumed)
    stack.write_back(resumed_opts)
    for k, (mod, o) in enumerate(zip(resumed, resumed_opts)):
        _assert_same(alone[k], _snapshot(mod, o))


def test_dlr_batch_gradient_raises_a_fedstream_error():
    model = _model(0)
    opt = DLR(model, lr=0.1, window=2, alpha=0.5)
    _, acts = model.forward(np.ones((2, SIZES[0]), np.float32))
    with pytest.raises(FedstreamError):
        opt.step(model.backward(acts, np.ones((2, SIZES[-1]), np.float32))[0])
