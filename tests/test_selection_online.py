"""Selection as an activation policy: an online MI estimate per client, top-l activated."""

import numpy as np
import pytest

from fedstream.errors import ConfigError
from fedstream.selection.online import OnlineMIEstimate, TopLActivation
from fedstream.selection.synthetic import informative_clients


def test_top_l_follows_the_informative_clients_through_a_drift():
    policy = TopLActivation(4, l=2, window=600, k=5, n_groups=30, smoothing=0.7, seed=0)
    means = np.zeros((10, 4))
    cold = policy.mask(0, means)  # cold start: l clients drawn per round
    assert (cold.sum(axis=1) == 2).all() and not (cold == cold[0]).all()
    blocks, y = informative_clients(600, [0.0, 2.0, 0.0, 1.5], dims=2, classes=4, seed=1)
    policy.observe(blocks, y)
    np.testing.assert_array_equal(policy.mask(1, means), np.tile([False, True, False, True], (10, 1)))
    drifted, y2 = informative_clients(600, [2.0, 0.0, 1.5, 0.0], dims=2, classes=4, seed=2)
    for _ in range(3):
        policy.observe(drifted, y2)
    np.testing.assert_array_equal(policy.mask(2, means)[0], [True, False, True, False])
    assert policy.estimate.updates == 4


def test_window_keeps_only_recent_rounds_and_skips_rare_classes():
    est = OnlineMIEstimate(2, window=300, k=5)
    blocks, y = informative_clients(900, [0.0, 2.0], dims=2, classes=3, seed=0)
    y = y.copy()
    y[-1] = 7  # a class seen once in the window: cannot be a query, must not raise
    s = est.update(blocks, y)
    assert s.shape == (2,) and s[1] > s[0]


def test_online_errors():
    with pytest.raises(ConfigError, match="l=3 clients cannot be selected from m=2"):
        TopLActivation(2, l=3)
    with pytest.raises(ConfigError, match="window must be an integer >= 2"):
        OnlineMIEstimate(2, window=1)
