"""`fedstream bench vfl` on a few rows: the plain split-NN and fedstream run the same training."""

import json

import numpy as np

from fedstream.bench.vfl_epoch import bench_vfl, format_vfl_bench


def test_plain_loop_and_fedstream_train_alike_and_the_ratio_is_reported(data_root):
    d = bench_vfl(data_root, reps=2, train_rows=400, test_rows=200)
    json.dumps(d)
    # the uncompressed transport is lossless: the plain loop sees the same values, so the same run
    assert np.isclose(d["train_loss_plain"], d["train_loss_fedstream"], rtol=1e-5, atol=0)
    assert d["accuracy_plain"] == d["accuracy_fedstream"]
    assert d["bytes_up"] == d["bytes_down"] == 4 * 4 * (11 + 4 * 100 * 128)  # 4 clients x 4 batches
    assert len(d["ratios"]) == len(d["cpu_ratios"]) == 2 and d["ratio_min"] > 0
    text = format_vfl_bench(d)
    assert "plain PyTorch split-NN" in text and "ratio fedstream / plain" in text
