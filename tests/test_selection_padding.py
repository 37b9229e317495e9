"""Padding of unselected clients' embeddings: zero, running mean, latest, EMA."""

import numpy as np
import pytest

from fedstream.errors import ConfigError, DataError
from fedstream.selection.padding import (
    EMAPadding,
    LatestPadding,
    MeanPadding,
    ZeroPadding,
    make_padding,
)

ROWS = np.random.default_rng(0).normal(size=(13, 3))


def feed(p, client=1, splits=(1, 5, 12)):
    """Rows 0..12 in batches of varying size (single rows as 1-D arrays)."""
    for part in np.split(ROWS, splits):
        p.update(client, part[0] if part.shape[0] == 1 else part)


@pytest.mark.parametrize("name", ["zero", "mean", "latest", "ema"])
def test_cold_start_is_zero_and_clients_are_independent(name):
    p = make_padding(name, 3, 3)
    np.testing.assert_array_equal(p.fill(0), np.zeros(3))
    feed(p, client=1)
    np.testing.assert_array_equal(p.fill(0), np.zeros(3))
    assert p.fill(2, 4).shape == (4, 3) and p.seen.tolist() == [0, 13, 0]


def test_zero_padding_stays_zero():
    p = ZeroPadding(2, 3)
    feed(p)
    np.testing.assert_array_equal(p.fill(1, 2), np.zeros((2, 3)))


def test_mean_padding_is_the_running_mean_whatever_the_batching():
    for splits in [(1, 5, 12), (4,), tuple(range(1, 13))]:
        p = MeanPadding(2, 3)
        feed(p, splits=splits)
        np.testing.assert_allclose(p.fill(1), ROWS.mean(axis=0), rtol=1e-12)


def test_latest_padding_is_the_last_row():
    p = LatestPadding(2, 3)
    feed(p)
    np.testing.assert_array_equal(p.fill(1), ROWS[-1])


@pytest.mark.parametrize("alpha", [0.1, 0.5, 1.0])
def test_ema_padding_matches_the_row_by_row_recursion(alpha):
    v = ROWS[0].copy()
    for x in ROWS[1:]:
        v = (1 - alpha) * v + alpha * x
    for splits in [(1, 5, 12), (7,)]:
        p = EMAPadding(2, 3, alpha=alpha)
        feed(p, splits=splits)
        np.testing.assert_allclose(p.fill(1), v, rtol=1e-12)


def test_assemble_fills_only_the_missing():
    p = MeanPadding(3, 2)
    e0 = np.ones((4, 2))
    out = p.assemble([e0, None, 3 * np.ones((4, 2))], 4)
    np.testing.assert_array_equal(out[0], e0)
    np.testing.assert_array_equal(out[1], np.zeros((4, 2)))
    out = p.assemble([None, None, None], 4)
    np.testing.assert_array_equal(out[2], 3 * np.ones((4, 2)))


def test_padding_errors():
    p = MeanPadding(2, 3)
    with pytest.raises(
        DataError, match=r"client 0's embedding must have shape \(3,\) or \(B, 3\), got \(4,\)"
    ):
        p.update(0, np.zeros(4))
    with pytest.raises(DataError, match="NaN"):
        p.update(0, np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ConfigError, match=r"client must be in 0..1, got 5"):
        p.fill(5)
    with pytest.raises(ConfigError, match=r"alpha must be in \(0, 1\]"):
        EMAPadding(2, 3, alpha=0.0)
    with pytest.raises(
        ConfigError, match="padding must be one of 'zero', 'mean', 'latest', 'ema', got 'knn'"
    ):
        make_padding("knn", 2, 3)
    with pytest.raises(DataError, match="expected 2 embeddings"):
        p.assemble([None], 1)


@pytest.mark.parametrize("name", ["zero", "mean", "latest", "ema"])
def test_update_rows_equals_update_client_by_client(name):
    rng = np.random.default_rng(0)
    many, one = make_padding(name, 3, 4), make_padding(name, 3, 4)
    for _ in range(6):
        rows, sent = rng.normal(size=(3, 4)), rng.random(3) < 0.6
        many.update_rows(rows, sent)
        for j in np.flatnonzero(sent):
            one.update(int(j), rows[j])
    np.testing.assert_array_equal(many.value, one.value)
    np.testing.assert_array_equal(many.seen, one.seen)
    with pytest.raises(DataError, match=r"update_rows expects rows of shape \(3, 4\)"):
        many.update_rows(np.zeros((2, 4)), np.ones(3, bool))
    with pytest.raises(DataError, match=r"clients \[1\] holds NaN"):
        many.update_rows(
            np.where(np.arange(3)[:, None] == 1, np.nan, 0.0) * np.ones((3, 4)), np.ones(3, bool)
        )
