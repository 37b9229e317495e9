"""Group testing: random groups, per-client means, batched equals one-group-at-a-time."""

import itertools

import numpy as np
import pytest

from fedstream.errors import ConfigError
from fedstream.selection.group_testing import client_scores, group_test, random_groups
from fedstream.selection.knn_mi import knn_mi
from fedstream.selection.synthetic import informative_clients


def test_random_groups_are_seeded_non_empty_and_end_with_the_full_set():
    g = random_groups(6, 10, rng=100)
    assert len(g) == 11 and g[-1] == tuple(range(6))
    assert all(len(s) >= 1 and list(s) == sorted(set(s)) and max(s) < 6 for s in g)
    assert g == random_groups(6, 10, rng=100) and g != random_groups(6, 10, rng=101)
    assert (
        random_groups(3, 2, include_full=False)[-1] != ()
        and len(random_groups(3, 2, include_full=False)) == 2
    )


def test_random_groups_cover_all_subsets_uniformly():
    draws = random_groups(3, 7000, rng=0, include_full=False)
    counts = np.array([draws.count(s) for s in {tuple(d) for d in draws}])
    assert counts.size == 7 and np.all(np.abs(counts / 7000 - 1 / 7) < 0.02)


def test_client_scores_sum_or_average_their_groups():
    groups = [(0,), (0, 1), (1, 2), (0, 1, 2)]
    scores = np.array([1.0, 2.0, 4.0, 8.0])
    total = client_scores(groups, scores, 4, aggregate="sum")  # the reference code accumulates
    np.testing.assert_allclose(total[:3], [1 + 2 + 8, 2 + 4 + 8, 4 + 8])
    mean = client_scores(groups, scores, 4, aggregate="mean")
    np.testing.assert_allclose(mean[:3], [(1 + 2 + 8) / 3, (2 + 4 + 8) / 3, (4 + 8) / 2])
    assert np.isnan(total[3]) and np.isnan(mean[3])


def test_batched_equals_one_group_at_a_time():
    blocks, y = informative_clients(300, [0.0, 0.4, 1.0, 2.0, 0.7], dims=2, classes=4, seed=2)
    a = group_test(blocks, y, n_groups=6, k=5, seed=3)
    b = group_test(blocks, y, n_groups=6, k=5, seed=3, batched=False)
    assert a.groups == b.groups
    np.testing.assert_array_equal(a.group_scores, b.group_scores)
    direct = knn_mi(blocks, y, a.groups, k=5).scores
    np.testing.assert_array_equal(a.group_scores, direct)
    c = group_test(blocks, y, n_groups=6, k=5, seed=3, queries=60, fagin_batch=20)
    d = group_test(blocks, y, n_groups=6, k=5, seed=3, queries=60)
    np.testing.assert_array_equal(c.group_scores, d.group_scores)
    np.testing.assert_array_equal(c.queries, d.queries)
    assert 0 < c.list_reads < 60 * 299 * sum(len(g) for g in dict.fromkeys(c.groups)) and d.list_reads is None


def test_group_testing_ranks_informative_clients_first():
    """Testing every subset removes the luck of the draw: the clients rank by signal strength."""
    strengths = [0.0, 2.0, 0.1, 1.5, 0.0, 1.0]
    blocks, y = informative_clients(900, strengths, dims=2, classes=5, seed=4)
    every = [s for r in range(1, 7) for s in itertools.combinations(range(6), r)]
    res = group_test(blocks, y, groups=every, k=10)
    assert set(res.ranking()[:3].tolist()) == {1, 3, 5}


def test_query_subsample_is_seeded():
    blocks, y = informative_clients(300, [0.5, 1.0], dims=2, classes=3, seed=0)
    a = group_test(blocks, y, queries=50, seed=7)
    assert a.queries.size == 50 and np.array_equal(
        a.queries, group_test(blocks, y, queries=50, seed=7).queries
    )
    assert group_test(blocks, y, queries=10_000, seed=7).queries.size == 300  # more than n: all samples


def test_group_testing_errors():
    blocks, y = informative_clients(60, [0.5, 1.0], dims=2, classes=3, seed=0)
    with pytest.raises(ConfigError, match=r"groups\[1\] is empty"):
        group_test(blocks, y, groups=[(0,), ()])
    with pytest.raises(ConfigError, match=r"names client 2; expected indices in 0..1"):
        group_test(blocks, y, groups=[(0, 2)])
    with pytest.raises(ConfigError, match="leaves no group"):
        random_groups(3, 0, include_full=False)
    with pytest.raises(ConfigError, match="n_groups must be an integer >= 0"):
        random_groups(3, -1)
