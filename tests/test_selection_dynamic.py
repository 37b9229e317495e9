"""Dynamic settings: discrete redraws, relaxed lifespans/arrivals, pessimistic score updates."""

import numpy as np
import pytest

from fedstream.errors import ConfigError
from fedstream.selection.digamma import psi
from fedstream.selection.dynamic import (
    DiscreteSchedule,
    PessimisticScores,
    RelaxedSchedule,
    term_bounds,
)
from fedstream.selection.knn_mi import knn_mi
from fedstream.selection.synthetic import informative_clients


def test_discrete_schedule_redraws_with_the_given_frequency():
    s = DiscreteSchedule(2000, keep=0.3, update_prob=0.2, seed=1)
    changed = np.array([s.changed(e) for e in range(2000)])
    assert changed[0] and abs(changed[1:].mean() - 0.2) < 0.03
    masks = [s.mask(e) for e in range(40)]
    for e in range(1, 40):
        assert np.array_equal(masks[e], masks[e - 1]) != changed[e]  # the subset changes exactly at redraws
    assert abs(masks[0].mean() - 0.3) < 0.04
    assert np.array_equal(DiscreteSchedule(2000, keep=0.3, update_prob=0.2, seed=1).mask(17), masks[17])
    assert not any(DiscreteSchedule(50, update_prob=0.0).changed(e) for e in range(1, 30))


def test_relaxed_schedule_lifespans_and_arrivals():
    s = RelaxedSchedule(3000, keep=0.5, arrival=0.1, lifespan=(2, 4), seed=0)
    present = s.mask.copy()
    for _ in range(4):
        step = s.step()
        ids = np.arange(3000)
        assert np.array_equal(
            step.mask, (present & ~np.isin(ids, step.departed)) | np.isin(ids, step.arrived)
        )
        assert not present[step.arrived].any() and present[step.departed].all()
        assert step.changed == step.arrived.size + step.departed.size
        present = step.mask.copy()
    assert step.epoch == 4 and 0 < present.sum() < 3000
    with pytest.raises(ConfigError, match=r"lifespan must be \(min, max\)"):
        RelaxedSchedule(10, lifespan=(5, 2))


def test_first_cohort_leaves_within_its_lifespan():
    s = RelaxedSchedule(2000, keep=0.5, arrival=0.0, lifespan=(2, 3), seed=2)
    n0 = s.mask.sum()
    departed = sum(s.step().departed.size for _ in range(3))
    assert departed == n0 and not s.mask.any()


def test_term_bounds_contain_every_query_term():
    blocks, y = informative_clients(300, [0.0, 1.0, 3.0], dims=2, classes=3, seed=0)
    lo, hi = term_bounds(y, 5)
    res = knn_mi(blocks, y, [(0,), (1,), (2,), (0, 1, 2)], k=5)
    counts = np.bincount(y)[y]
    terms = psi(300) - psi(counts) + psi(5) - psi(res.m_counts)
    assert lo <= terms.min() and terms.max() <= hi
    assert hi == pytest.approx((psi(300) - psi(np.bincount(y))).max() + psi(5) - psi(1))


def test_term_bounds_contain_the_terms_of_tied_data():
    """Ties (issue 20): m_q runs from 1 (ties at the radius) to N (a constant client)."""
    rng = np.random.default_rng(0)
    y = np.arange(300) % 3
    blocks = [np.zeros((300, 1)), rng.integers(0, 3, (300, 2)), np.rint(4 * rng.normal(size=(300, 1)))]
    lo, hi = term_bounds(y, 5)
    res = knn_mi(blocks, y, [(0,), (1,), (2,)], k=5)
    terms = psi(300) - psi(np.bincount(y)[y]) + psi(5) - psi(res.m_counts)
    assert res.m_counts.max() == 300 and res.m_counts.min() < 5
    assert lo <= terms.min() and terms.max() <= hi


def test_pessimistic_scores_trigger_reselection_as_data_change():
    y = np.arange(1000) % 4
    p = PessimisticScores([1.0, 0.9, 0.5, 0.1], [0, 1], y, k=10)
    assert not p.needs_reselection()
    p.update(10, y)  # 1 % changed: the gap between 0.9 and 0.5 still holds
    s = p.current()
    assert s[0] < 1.0 and s[1] < 0.9 and s[2] > 0.5 and s[3] > 0.1 and not p.needs_reselection()
    p.update(300, y)
    assert p.fraction == pytest.approx(0.31) and p.needs_reselection()
    p.reset([1.0, 0.9, 0.5, 0.1], [0, 1], y)
    assert not p.needs_reselection() and p.fraction == 0.0


def test_schedule_errors():
    with pytest.raises(ConfigError, match=r"update_prob must be in \[0, 1\], got 1.5"):
        DiscreteSchedule(10, update_prob=1.5)
    with pytest.raises(ConfigError, match=r"keep must be in \(0, 1\], got 0"):
        DiscreteSchedule(10, keep=0)
    with pytest.raises(ConfigError, match="epoch must be an integer >= 0"):
        DiscreteSchedule(10).mask(-1)


def test_marginal_score_bounds_hold_for_any_group_scores_in_range():
    from fedstream.selection.dynamic import score_bounds

    lo, hi = -1.5, 2.0
    mlo, mhi = score_bounds(lo, hi, "marginal")
    corners = [0.5 * (a + b - c) for a in (lo, hi) for b in (lo, hi) for c in (lo, hi)]
    assert mlo == pytest.approx(min(corners)) and mhi == pytest.approx(max(corners))
    assert score_bounds(lo, hi, "mean") == (lo, hi)
