"""Secure mode: distances summed under Paillier equal the plain sums, and the MI built on them is
unchanged."""

import numpy as np
import pytest

from fedstream.errors import ConfigError
from fedstream.selection.reference import reference_mi
from fedstream.selection.secure import PaillierAggregator, secure_group_mi

phe = pytest.importorskip("phe")  # fedstream.selection.secure imports phe only when used


@pytest.fixture(scope="module")
def agg():
    return PaillierAggregator(key_bits=512)


@pytest.mark.parametrize("pack", [True, False])
def test_secure_sum_equals_plain_sum(pack):
    a = PaillierAggregator(key_bits=512, pack=pack)
    rng = np.random.default_rng(0)
    local = [rng.integers(0, 50_000, 300).astype(float) for _ in range(3)]
    out, cost = a.secure_sum(local)
    np.testing.assert_array_equal(out, np.sum(local, axis=0))
    assert (cost["slots"] > 1) == pack and cost["values"] == 900
    assert (
        cost["ciphertexts"] == 3 * -(-300 // cost["slots"]) and cost["bytes_up"] == cost["ciphertexts"] * 128
    )


def test_fixed_point_scale_for_real_distances():
    a = PaillierAggregator(key_bits=512, scale=1000.0)
    local = [np.array([0.1234, 2.5]), np.array([1.0, 0.0004])]
    out, _ = a.secure_sum(local)
    np.testing.assert_allclose(out, [1.123, 2.5], atol=1e-3)


def test_secure_mi_equals_plain_mi(agg):
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 80)
    blocks = [rng.integers(0, 9, (80, 4)) + y[:, None] * s for s in (0, 2)]
    queries = np.arange(0, 80, 9)
    score, cost = secure_group_mi(blocks, y, (0, 1), k=3, queries=queries, aggregator=agg)
    assert score == reference_mi(blocks, y, (0, 1), k=3, queries=queries)
    assert cost["values"] == 2 * 80 * queries.size and cost["encrypt_s"] > 0


def test_secure_errors(agg):
    with pytest.raises(ConfigError, match="key_bits must be a multiple of 8 and >= 256"):
        PaillierAggregator(key_bits=100)
    from fedstream.errors import DataError

    with pytest.raises(DataError, match="non-negative"):
        agg.secure_sum([np.array([-1.0])])
    with pytest.raises(DataError, match="same length"):
        agg.secure_sum([np.zeros(3), np.zeros(4)])
