"""Selection as an activation policy: exploration rounds, the server's stand-in (padding and the
buffer of rounds where every client sent), the online MI estimate and its top l."""

import numpy as np
import pytest

from fedstream.errors import ConfigError, DataError
from fedstream.selection.online import (
    ExplorationBuffer,
    OnlineMIEstimate,
    TopLActivation,
)
from fedstream.selection.synthetic import informative_clients


def _feed(policy: TopLActivation, blocks, y) -> None:
    """Show the policy rounds in which every client sent (the server input rows of exploration rounds)."""
    rows = np.concatenate(blocks, axis=1).astype(np.float32)
    for row, label in zip(rows, y):
        policy.received(int(label), row, np.ones(len(blocks), dtype=bool))


def test_exploration_rounds_activate_everyone_and_nobody_passive_is_queried():
    policy = TopLActivation(4, l=2, embedding=2, window=600, explore=7, k=5, n_groups=30, seed=0)
    means = np.zeros((50, 4))
    cold = policy.mask(3, means)  # rounds 150..199
    t = 150 + np.arange(50)
    assert cold[t % 7 == 0].all()
    assert (cold[t % 7 != 0].sum(axis=1) == 2).all() and len(set(map(tuple, cold[t % 7 != 0]))) > 1
    assert not policy.queried(cold).any()


def test_top_l_follows_the_informative_clients_through_a_drift():
    policy = TopLActivation(
        4, l=2, embedding=2, window=600, explore=10, k=5, n_groups=30, smoothing=0.7, seed=0
    )
    means = np.zeros((10, 4))
    blocks, y = informative_clients(599, [0.0, 2.0, 0.0, 1.5], dims=2, classes=4, seed=1)
    _feed(policy, blocks, y)
    policy.observe([], [])  # the buffer is not full yet: no estimate
    assert policy.estimate.scores is None
    _feed(policy, [b[:1] for b in blocks], y[:1])
    policy.observe([], [])
    mask = policy.mask(1, means)  # rounds 10..19: round 10 explores
    np.testing.assert_array_equal(mask[1:], np.tile([False, True, False, True], (9, 1)))
    assert mask[0].all()
    drifted, y2 = informative_clients(600, [2.0, 0.0, 1.5, 0.0], dims=2, classes=4, seed=2)
    for _ in range(3):  # the exploration rounds keep arriving and show the change
        _feed(policy, drifted, y2)
        policy.observe([], [])
    np.testing.assert_array_equal(policy.mask(2, means)[1], [True, False, True, False])
    assert policy.estimate.updates == 4


def test_padding_sees_only_what_was_really_sent():
    policy = TopLActivation(3, l=1, embedding=2, window=20, padding="latest")
    policy.received(0, np.array([1, 2, 3, 4, 5, 6], np.float32), np.array([True, False, True]))
    np.testing.assert_array_equal(policy.fill(0, 2), [[1, 2], [1, 2]])
    np.testing.assert_array_equal(policy.fill(1, 1), [[0, 0]])  # never sent: zeros
    np.testing.assert_array_equal(policy.fill(2, 1), [[5, 6]])
    assert policy.buffer.count == 0  # client 1 did not send: not a round for the estimate
    policy.received(1, np.arange(6, dtype=np.float32), np.ones(3, bool))
    assert policy.buffer.count == 1 and policy.fill(0, 1).dtype == np.float32
    mean = TopLActivation(2, l=1, embedding=1, window=20, padding="mean")
    for v in (1.0, 3.0):
        mean.received(0, np.array([v, 0.0], np.float32), np.array([True, False]))
    assert mean.fill(0, 1)[0, 0] == pytest.approx(2.0)


def test_buffer_is_a_ring_of_the_latest_rows_scaled_per_client():
    buf = ExplorationBuffer(2, 1, window=3)
    for i in range(5):
        buf.push(np.array([i, 10.0 * i]), y=i)
    blocks, y = buf.blocks()
    np.testing.assert_array_equal(y, [2, 3, 4])  # oldest first
    np.testing.assert_allclose(blocks[0][:, 0], blocks[1][:, 0])  # RMS-scaled: same spread
    with pytest.raises(DataError, match=r"exploration row must have shape \(2,\)"):
        buf.push(np.zeros(3), 0)


def test_state_round_trip_continues_identically():
    a = TopLActivation(3, l=1, embedding=2, window=30, explore=5, k=3, n_groups=4, seed=1)
    blocks, y = informative_clients(40, [0.0, 2.0, 0.5], dims=2, classes=3, seed=3)
    _feed(a, blocks, y)
    a.observe([], [])
    b = TopLActivation(3, l=1, embedding=2, window=30, explore=5, k=3, n_groups=4, seed=1)
    b.load_state_dict(a.state_dict())
    _feed(a, blocks[::-1], y)
    _feed(b, blocks[::-1], y)
    a.observe([], [])
    b.observe([], [])
    np.testing.assert_array_equal(a.estimate.scores, b.estimate.scores)
    np.testing.assert_array_equal(a.fill(1, 1), b.fill(1, 1))
    with pytest.raises(DataError, match="topl buffer of shape"):
        TopLActivation(3, l=1, embedding=4, window=30).load_state_dict(a.state_dict())


def test_window_keeps_only_recent_rows_and_skips_rare_classes():
    est = OnlineMIEstimate(2, window=300, k=5)
    blocks, y = informative_clients(900, [0.0, 2.0], dims=2, classes=3, seed=0)
    y = y.copy()
    y[-1] = 7  # a class seen once in the window: cannot be a query, must not raise
    s = est.update(blocks, y)
    assert s.shape == (2,) and s[1] > s[0]
    tiny = OnlineMIEstimate(2, window=4, k=5)
    assert tiny.update([b[:4] for b in blocks], y[:4]) is None and tiny.updates == 0  # every class too rare


def test_online_errors():
    with pytest.raises(ConfigError, match="l=3 clients cannot be selected from m=2"):
        TopLActivation(2, l=3, embedding=4)
    with pytest.raises(ConfigError, match="window must be an integer >= 2"):
        OnlineMIEstimate(2, window=1)
    with pytest.raises(ConfigError, match="explore .* must be an integer >= 1, got 0"):
        TopLActivation(2, l=1, embedding=4, explore=0)
    with pytest.raises(
        ConfigError, match="padding must be one of 'zero', 'mean', 'latest', 'ema', got 'median'"
    ):
        TopLActivation(2, l=1, embedding=4, padding="median")
