"""Client scores from group scores (issue 20): the default does not depend on the random groups.

Before the fix the default summed the MI of a client's random groups (the VF-PS reference code),
which rewards sitting in more groups: on MNIST's four column strips the edge strip 3 ranked first.
"""

import itertools

import numpy as np
import pytest

from fedstream.errors import ConfigError
from fedstream.selection.group_testing import (
    AGGREGATES,
    DEFAULT_AGGREGATE,
    client_scores,
    group_test,
    marginal_groups,
    plan_tests,
)
from fedstream.selection.methods import VFPSSelector
from fedstream.selection.synthetic import informative_clients
from fedstream.vfl import selection_spec


def test_mnist_strips_rank_centre_first_by_default(data_root):
    from fedstream.bench.selection import mnist_blocks

    blocks, y = mnist_blocks(data_root, 3000)
    res = group_test(blocks, y)
    # alone: strips 1, 2 reach 91.8 % / 90.1 % test accuracy, strips 3, 0 47.5 % / 36.1 %
    assert res.ranking().tolist() == [1, 2, 3, 0], res.client_scores
    assert VFPSSelector(2, seed=1).select(blocks, y).clients == (1, 2)
    assert VFPSSelector(2, seed=3).select(blocks, y).clients == (1, 2)


def test_marginal_design_is_fixed_and_its_scores_are_extreme_marginal_contributions():
    assert marginal_groups(3) == [(0,), (1,), (2,), (1, 2), (0, 2), (0, 1), (0, 1, 2)]
    assert marginal_groups(1) == [(0,)]
    assert plan_tests(3, 50, seed=1)[0] == plan_tests(3, 50, seed=2)[0] == marginal_groups(3)
    v = {g: float(len(g)) ** 0.5 + 0.3 * (0 in g) for g in marginal_groups(3)}  # any set function
    got = client_scores(list(v), np.array(list(v.values())), 3)
    full = v[(0, 1, 2)]
    want = [0.5 * (v[(0,)] + full - v[(1, 2)]), 0.5 * (v[(1,)] + full - v[(0, 2)]),
            0.5 * (v[(2,)] + full - v[(0, 1)])]
    np.testing.assert_allclose(got, want)
    assert client_scores([(0,)], np.array([0.7]), 1)[0] == pytest.approx(0.7)  # one client: its own MI


def test_marginal_respects_dominance_for_any_set_function():
    """If client a adds at least as much as b to every coalition, a scores at least as high."""
    rng = np.random.default_rng(0)
    m = 5
    for _ in range(200):
        w = rng.random(m)
        cap = rng.uniform(0.5, 3.0)

        def v(g):  # saturating, like MI with the label: a client of larger w dominates
            return min(cap, sum(w[j] for j in g))

        groups = marginal_groups(m)
        scores = client_scores(groups, np.array([v(g) for g in groups]), m)
        for a, b in itertools.permutations(range(m), 2):
            if w[a] >= w[b]:
                assert scores[a] >= scores[b] - 1e-12


def test_default_ranking_of_synthetic_clients_does_not_depend_on_the_seed():
    strengths = [0.0, 0.4, 0.9, 1.6, 2.5]
    blocks, y = informative_clients(1500, strengths, dims=2, classes=5, seed=4)
    rankings = {tuple(group_test(blocks, y, seed=s).ranking().tolist()) for s in range(5)}
    assert rankings == {(4, 3, 2, 1, 0)}


def test_sum_and_mean_stay_options_on_random_groups():
    blocks, y = informative_clients(300, [0.0, 1.0, 2.0], dims=2, classes=3, seed=0)
    for agg in ("sum", "mean"):
        res = group_test(blocks, y, n_groups=6, seed=1, aggregate=agg)
        assert len(res.groups) == 7 and res.groups[-1] == (0, 1, 2)
    with pytest.raises(ConfigError, match="aggregate"):
        group_test(blocks, y, aggregate="median")
    with pytest.raises(ConfigError, match="leave-one-out"):
        client_scores([(0,), (0, 1, 2)], np.array([1.0, 2.0]), 3)


def test_library_and_spec_defaults_agree():
    assert DEFAULT_AGGREGATE == "marginal" == selection_spec.SelectionSpec().aggregate
    assert set(selection_spec.AGGREGATES) == set(AGGREGATES)
