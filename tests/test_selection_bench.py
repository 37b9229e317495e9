"""`fedstream bench selection` on a small problem: the parts run, agree, and are reported."""

import json

import pytest

from fedstream.bench.selection import (
    bench_selection,
    format_selection_bench,
    mnist_blocks,
)


def test_mnist_blocks_are_four_pixel_column_strips(data_root):
    blocks, y = mnist_blocks(data_root, 100)
    assert [b.shape for b in blocks] == [(100, 196)] * 4 and y.shape == (100,)


def test_small_bench_runs_and_formats(data_root):
    pytest.importorskip("phe")
    d = bench_selection(data_root, samples=1500, ref_samples=300, scale_clients=6, scale_samples=1500,
                        scale_queries=500, key_bits=512)
    json.dumps(d)
    assert d["mnist"]["samples"] == 1500 and d["mnist"]["distinct_groups"] <= 11
    assert d["subsample"]["scores_equal"] and d["subsample"]["speedup"] > 0  # measured, not asserted
    assert d["scale"]["clients"] == 6 and d["scale"]["queries"] == 500 and d["paillier"]["available"]
    assert d["mnist"]["cpu_s"] > 0 and d["paillier"]["slots_per_ciphertext"] > 1
    assert d["fagin"]["equals_reference"] and 0 < d["fagin"]["read_fraction"] < 1
    re = d["reselection"]
    assert re["relaxed"]["rows"] < 1500 and re["full"]["rows"] == 1500
    for case in (re["relaxed"], re["full"]):  # the int8 engine against the float32 one it replaced
        assert case["scores_equal"] and case["picks_equal"] and case["max_score_diff"] == 0
        assert len(case["old_s"]) == len(case["new_s"]) == 2
    text = format_selection_bench(d)
    assert "MNIST 1,500 x 4 clients" in text and "speed-up" in text and "Paillier 512-bit" in text
    assert "relaxed re-selection" in text and "full MNIST scoring, 1,500 rows" in text
