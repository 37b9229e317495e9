"""Feature splits (random; max/median/min correlation) and row splits (60/20/20, dealt evenly)."""

import itertools

import numpy as np
import pytest

from fedstream.chfl.splits import (
    abs_correlation,
    correlation_split,
    cross_scores,
    feature_split,
    random_split,
    split_rows,
)
from fedstream.errors import ConfigError


def check_partition(fs, d):
    parts = [fs.common, *fs.unique]
    allcols = np.concatenate(parts)
    assert sorted(allcols.tolist()) == list(range(d))  # disjoint and complete


@pytest.mark.parametrize(
    "d,k,ratio,n_common", [(54, 5, 0.3, 16), (48, 5, 0.3, 14), (27, 5, 0.1, 3), (54, 2, 0.5, 27)]
)
def test_random_split_sizes(d, k, ratio, n_common):
    fs = random_split(d, k, ratio=ratio, seed=0)
    check_partition(fs, d)
    assert len(fs.common) == n_common
    sizes = [len(u) for u in fs.unique]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == d - n_common
    own = fs.own(1)
    assert own[:n_common].tolist() == fs.common.tolist() and own[n_common:].tolist() == fs.unique[1].tolist()


def test_random_split_is_seeded():
    a, b, c = (random_split(54, 5, seed=s) for s in (3, 3, 4))
    assert a.common.tolist() == b.common.tolist() and all(
        np.array_equal(x, y) for x, y in zip(a.unique, b.unique)
    )
    assert a.common.tolist() != c.common.tolist()


@pytest.mark.parametrize("ratio,k,match", [
    (0.0, 5, r"common_ratio: expected a number strictly between 0 and 1, found 0.0"),
    (1.0, 5, r"common_ratio: expected a number strictly between 0 and 1"),
    (0.9, 10, r"common_ratio: 0.9 leaves 5 of 54 features for clients = 10"),
])
def test_bad_ratio(ratio, k, match):
    with pytest.raises(ConfigError, match=match):
        random_split(54, k, ratio=ratio)


def naive_score(R, common):
    rest = [j for j in range(R.shape[0]) if j not in common]
    return sum(R[i, j] for i in common for j in rest)


def test_correlation_split_picks_extremes_by_brute_force():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 8))
    X[:, 1] += 2 * X[:, 0]
    X[:, 5] -= X[:, 4]
    R = abs_correlation(X)
    combos = list(itertools.combinations(range(8), 2))
    scores = [naive_score(R, c) for c in combos]
    np.testing.assert_allclose(cross_scores(R, np.array(combos)), scores)
    order = np.argsort(scores, kind="stable")
    for which, idx in (("max", order[-1]), ("min", order[0]), ("median", order[len(order) // 2])):
        fs = correlation_split(X, 3, ratio=0.25, which=which, seed=1)
        check_partition(fs, 8)
        assert tuple(fs.common) == combos[idx], which


def test_constant_column_has_zero_correlation():
    X = np.random.default_rng(1).standard_normal((50, 4))
    X[:, 2] = 7.0
    R = abs_correlation(X)
    assert np.all(R[2] == 0) and np.all(R[:, 2] == 0) and np.all(np.diag(R) == 0)


def test_feature_split_dispatch():
    X = np.random.default_rng(2).standard_normal((100, 10))
    assert (
        feature_split("random", X, 2, ratio=0.3, seed=5).common.tolist()
        == random_split(10, 2, ratio=0.3, seed=5).common.tolist()
    )
    assert len(feature_split("min-corr", X, 2, ratio=0.3, seed=0).common) == 3
    with pytest.raises(
        ConfigError, match=r"split: expected one of random, max-corr, median-corr, min-corr, found 'best'"
    ):
        feature_split("best", X, 2, ratio=0.3, seed=0)


def test_split_rows():
    rs = split_rows(1000, 3, seed=0)
    train, val = np.concatenate(rs.train), np.concatenate(rs.val)
    assert len(train) == 600 and len(val) == 200 and len(rs.test) == 200
    assert len(np.unique(np.concatenate([train, val, rs.test]))) == 1000  # disjoint, complete
    assert [len(t) for t in rs.train] == [200, 200, 200]
    assert sorted(len(v) for v in rs.val) == [66, 67, 67]
    assert not np.array_equal(split_rows(1000, 3, seed=1).test, rs.test)
    with pytest.raises(ConfigError, match=r"5 rows are too few for 5 clients"):
        split_rows(5, 5, seed=0)
