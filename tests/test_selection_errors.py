"""Bad inputs to the MI estimate fail early with messages naming the argument and the expected value."""

import sys

import numpy as np
import pytest

from fedstream.errors import ConfigError, DataError
from fedstream.selection.digamma import psi
from fedstream.selection.knn_mi import knn_mi
from fedstream.selection.reference import reference_mi

Y = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 2])
BLOCKS = [np.arange(20.0).reshape(10, 2), np.ones((10, 3))]


@pytest.mark.parametrize("fn", [knn_mi, lambda b, y, g, **kw: reference_mi(b, y, g[0], **kw)])
def test_k_must_be_below_every_queried_class_size(fn):
    with pytest.raises(
        ConfigError,
        match=r"k=3 must be smaller than every queried class's size: class code 0 has 3 "
        r"samples.*use k <= 2",
    ):
        fn(BLOCKS, Y, [(0,)], k=3)
    fn(BLOCKS, Y, [(0,)], k=3, queries=np.arange(3, 7))  # only class 1 (4 samples) is queried: fine
    with pytest.raises(ConfigError, match="k .* must be an integer >= 1"):
        fn(BLOCKS, Y, [(0,)], k=0)


@pytest.mark.parametrize("groups,match", [
    ([()], r"groups\[0\] is empty; expected a non-empty tuple of client indices in 0..1"),
    ([(0,), (2,)], r"groups\[1\] = \(2,\) names client 2"),
    ([(1, 1)], "repeats a client"),
    ([], "groups must be a non-empty list"),
])
def test_bad_groups(groups, match):
    with pytest.raises(ConfigError, match=match):
        knn_mi(BLOCKS, Y, groups, k=1)


@pytest.mark.parametrize("blocks,match", [
    ([], "blocks must be a non-empty list"),
    (np.zeros((10, 2)), "blocks must be a non-empty list"),
    ([np.zeros(10)], r"blocks\[0\] must be 2-D"),
    ([np.zeros((10, 2)), np.zeros((9, 2))], r"blocks\[1\] has 9 rows but blocks\[0\] has 10"),
    ([np.full((10, 2), np.nan)], "NaN"),
    ([np.zeros((10, 0))], "no feature columns"),
])
def test_bad_blocks(blocks, match):
    with pytest.raises(DataError, match=match):
        knn_mi(blocks, Y, [(0,)], k=1)


def test_bad_labels_queries_and_options():
    with pytest.raises(DataError, match=r"labels must be 1-D with one label per sample \(10\)"):
        knn_mi(BLOCKS, Y[:5], [(0,)], k=1)
    with pytest.raises(DataError, match="labels must be integer class ids"):
        knn_mi(BLOCKS, Y.astype(float), [(0,)], k=1)
    with pytest.raises(ConfigError, match=r"queries must index samples 0..9"):
        knn_mi(BLOCKS, Y, [(0,)], k=1, queries=[3, 12])
    with pytest.raises(ConfigError, match="repeated"):
        knn_mi(BLOCKS, Y, [(0,)], k=1, queries=[3, 3])
    with pytest.raises(ConfigError, match="psi must be one of 'approx', 'exact'"):
        knn_mi(BLOCKS, Y, [(0,)], k=1, psi="digamma")
    with pytest.raises(ConfigError, match="backend must be one of 'auto', 'dots', 'int8', 'direct', got 'tr"):
        knn_mi(BLOCKS, Y, [(0,)], k=1, backend="tree")
    with pytest.raises(ConfigError, match="precision must be one of"):
        knn_mi(BLOCKS, Y, [(0,)], k=1, precision="half")
    with pytest.raises(ConfigError, match="tile must be positive"):
        knn_mi(BLOCKS, Y, [(0,)], k=1, tile=(0, 5))
    with pytest.raises(ConfigError, match="positive integers"):
        psi([0, 1])


def test_missing_phe_names_the_install_command(monkeypatch):
    from fedstream.selection.secure import PaillierAggregator, load_phe

    monkeypatch.setitem(sys.modules, "phe", None)  # as if phe were not installed
    with pytest.raises(ConfigError, match="pip install phe"):
        load_phe()
    with pytest.raises(ConfigError, match="pip install phe"):
        PaillierAggregator(key_bits=512)


def _fagin(blocks, y, group, **kw):
    from fedstream.selection.fagin import fagin_group_mi

    return fagin_group_mi(blocks, y, group, **kw)


def _secure(blocks, y, group, **kw):
    pytest.importorskip("phe", reason="secure mode needs phe (pip install phe)")
    from fedstream.selection.secure import PaillierAggregator, secure_group_mi

    return secure_group_mi(blocks, y, group, aggregator=PaillierAggregator(key_bits=512), **kw)


def _group_test(blocks, y, group, **kw):
    from fedstream.selection.group_testing import group_test

    return group_test(blocks, y, groups=[group], **kw)


def _vfps(blocks, y, group, **kw):
    from fedstream.selection.methods import VFPSSelector

    return VFPSSelector(len(group) or 1, k=kw["k"]).select(blocks, y)


EQ1 = {"reference": lambda b, y, g, **kw: reference_mi(b, y, g, **kw), "fagin": _fagin, "secure": _secure,
       "group_test": _group_test}


@pytest.mark.parametrize("entry", sorted(EQ1))
def test_every_eq1_entry_point_rejects_an_empty_group(entry):
    with pytest.raises(
        ConfigError, match=r"groups\[0\] is empty; expected a non-empty tuple of client indices in 0..1"
    ):
        EQ1[entry](BLOCKS, Y, (), k=1)


@pytest.mark.parametrize("entry", sorted(EQ1) + ["vfps"])
def test_every_eq1_entry_point_rejects_k_at_least_a_class_size(entry):
    fn = _vfps if entry == "vfps" else EQ1[entry]
    with pytest.raises(
        ConfigError,
        match=r"k=3 must be smaller than every queried class's size: class code 0 has 3 "
        r"samples.*use k <= 2",
    ):
        fn(BLOCKS, Y, (0, 1), k=3)


def test_l_above_m_is_rejected_everywhere():
    from fedstream.selection.methods import brute_force, make_selector
    from fedstream.selection.online import OnlineMIEstimate, TopLActivation

    with pytest.raises(ConfigError, match=r"l=3 clients cannot be selected from m=2; expected 1 <= l <= 2"):
        brute_force(2, 3, lambda s: 1.0)
    with pytest.raises(ConfigError, match=r"l=3 clients cannot be selected from m=2"):
        make_selector("random", l=3).select(BLOCKS, Y)
    with pytest.raises(ConfigError, match=r"l=5 clients cannot be selected from m=4"):
        TopLActivation(4, l=5, embedding=2)
    with pytest.raises(ConfigError, match=r"l=3 clients cannot be selected from m=2"):
        OnlineMIEstimate(2).top(3)
