"""Selection methods: VF-PS, random picking, all clients, brute force."""

import numpy as np
import pytest

from fedstream.errors import ConfigError
from fedstream.selection.methods import (
    AllSelector,
    RandomSelector,
    VFPSSelector,
    brute_force,
    make_selector,
    random_pick,
)
from fedstream.selection.synthetic import informative_clients


@pytest.fixture(scope="module")
def data():
    return informative_clients(600, [0.0, 1.8, 0.1, 1.2], dims=2, classes=4, seed=6)


def test_vfps_selects_the_informative_clients(data):
    blocks, y = data
    sel = VFPSSelector(2, n_groups=12, seed=0).select(blocks, y)
    assert sel.clients == (1, 3) and sel.method == "vfps" and sel.seconds > 0
    mean = VFPSSelector(2, n_groups=12, seed=0, aggregate="mean").select(blocks, y)
    assert mean.clients == (1, 3)  # summed (default, the reference's) or averaged: the same pick here
    assert mean.scores.shape == (4,) and np.argmax(mean.scores) == 1
    np.testing.assert_array_equal(sel.mask(4), [False, True, False, True])


def test_random_picking_is_uniform_and_redrawn(data):
    blocks, y = data
    sel = RandomSelector(2, seed=1)
    draws = [sel.select(blocks, y).clients for _ in range(3000)]
    assert all(len(d) == 2 and d == tuple(sorted(set(d))) for d in draws)
    freq = np.bincount(np.concatenate(draws), minlength=4) / (2 * 3000)
    assert np.all(np.abs(freq - 0.25) < 0.02) and len(set(draws)) == 6
    assert random_pick(5, 5, 0) == (0, 1, 2, 3, 4)


def test_all_and_factory(data):
    blocks, y = data
    assert AllSelector().select(blocks, y).clients == (0, 1, 2, 3)
    assert isinstance(make_selector("random", l=1), RandomSelector)
    assert make_selector("vfps", l=2, k=5).k == 5
    with pytest.raises(
        ConfigError, match="selection method must be one of 'vfps', 'random', 'all', got 'best'"
    ):
        make_selector("best", l=1)


def test_brute_force_keeps_best_and_worst():
    weights = np.array([0.1, 0.9, 0.3, 0.6])
    calls = []

    def train_and_score(subset):
        calls.append(subset)
        return float(weights[list(subset)].sum())

    res = brute_force(4, 2, train_and_score)
    assert len(calls) == 6 and res.best == (1, 3) and res.worst == (0, 2)
    assert res.scores[(1, 3)] == pytest.approx(1.5)
    loss = brute_force(4, 2, lambda s: -train_and_score(s), higher_is_better=False)
    assert loss.best == (1, 3) and loss.worst == (0, 2)


def test_l_out_of_range(data):
    blocks, y = data
    with pytest.raises(ConfigError, match=r"l=5 clients cannot be selected from m=4; expected 1 <= l <= 4"):
        VFPSSelector(5).select(blocks, y)
    with pytest.raises(ConfigError, match=r"l=0 clients cannot be selected"):
        RandomSelector(0).select(blocks, y)
    with pytest.raises(ConfigError, match=r"l=3 clients cannot be selected from m=2"):
        random_pick(2, 3)
    with pytest.raises(ConfigError, match="finite score"):
        brute_force(3, 1, lambda s: float("nan"))
