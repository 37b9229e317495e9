"""Batch VFL training: it learns, bytes are exact per direction and epoch, outputs, errors."""

import csv
import json

import numpy as np
import pytest
import torch

from fedstream.errors import ConfigError, ProtocolError
from fedstream.transport import CompressionSpec
from fedstream.transport.messages import Embedding, Gradient
from fedstream.vfl import (
    COLUMNS,
    BatchClient,
    BatchServer,
    BatchVFLSettings,
    run_batch_vfl,
)
from fedstream.vfl.data import strips

SMALL = dict(train_rows=2000, test_rows=500, hidden=64, embedding=32, batch_size=50, lr=0.1)


def test_uncompressed_training_learns_and_counts_plain_bytes(data_root, tmp_path):
    events = []
    summary = run_batch_vfl(
        BatchVFLSettings(epochs=2, **SMALL), data_root, seed=0, progress=events.append, out=tmp_path
    )
    rows = summary["per_epoch"]
    assert rows[-1]["test_accuracy"] > 0.4  # chance is 0.1
    msg = 11 + 4 * 50 * 32  # header + float32 (batch x embedding), per client per step
    for row in rows:
        assert row["steps"] == 40 and row["bytes_up"] == row["bytes_down"] == 40 * 4 * msg
        assert row["eval_bytes_up"] == 10 * 4 * msg  # 500 test rows in batches of 50, through the uplink
    assert summary["bytes"]["total"] == 2 * 2 * 40 * 4 * msg
    assert summary["bytes_per_client"] == summary["bytes"]["total"] / 4
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
    assert any(e["event"] == "step" and e["steps"] == 40 for e in events)
    with open(tmp_path / "metrics.csv") as fh:
        written = list(csv.DictReader(fh))
    assert list(written[0]) == COLUMNS and [int(r["bytes_up"]) for r in written] == [
        r["bytes_up"] for r in rows
    ]
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert (
        saved["final_accuracy"] == summary["final_accuracy"] and saved["config"]["compression.up"] == "none"
    )


def test_compressed_training_learns_with_exact_compressed_bytes(data_root):
    spec = CompressionSpec(up="topk", down="quant-huffman", ratio=0.125)
    summary = run_batch_vfl(BatchVFLSettings(epochs=2, compression=spec, **SMALL), data_root, seed=0)
    row = summary["per_epoch"][0]
    k = 4  # ceil(0.125 * 32) entries per row; a bitmap (50*32/8 bytes) beats delta-coded indices here
    assert row["bytes_up"] == 40 * 4 * (12 + 1 + 50 * 32 // 8 + 4 * 50 * k)
    plain = 40 * 4 * (11 + 4 * 50 * 32)
    assert 0 < row["bytes_down"] < plain / 4  # Huffman-coded 3-sigma symbols: ~2-3 bits per entry
    assert summary["per_epoch"][-1]["test_accuracy"] > 0.4


def test_same_seed_same_run(data_root):
    s = BatchVFLSettings(epochs=1, compression=CompressionSpec(up="topk-grad", cache=True), **SMALL)
    a, b = run_batch_vfl(s, data_root, seed=3), run_batch_vfl(s, data_root, seed=3)
    assert a["per_epoch"][0]["test_accuracy"] == b["per_epoch"][0]["test_accuracy"]
    assert a["per_epoch"][0]["train_loss"] == b["per_epoch"][0]["train_loss"]
    assert torch.get_num_threads() >= 1


def test_compression_changes_what_the_server_trains_on(data_root):
    """The receiver gets the lossy decoded values: a lossy run differs from the uncompressed one."""
    base = run_batch_vfl(BatchVFLSettings(epochs=1, **SMALL), data_root, seed=0)
    signed = run_batch_vfl(
        BatchVFLSettings(epochs=1, compression=CompressionSpec(down="sign-scaled"), **SMALL),
        data_root,
        seed=0,
    )
    assert base["per_epoch"][0]["train_loss"] != signed["per_epoch"][0]["train_loss"]


def test_strips_split_image_rows():
    assert strips(28, 4) == [slice(0, 7), slice(7, 14), slice(14, 21), slice(21, 28)]
    assert strips(32, 3) == [slice(0, 11), slice(11, 22), slice(22, 32)]
    with pytest.raises(ConfigError, match="vfl.clients = 29: .*expected 1..28"):
        strips(28, 29)


def test_run_rejects_bad_arguments(tmp_path):
    with pytest.raises(ConfigError, match="expected BatchVFLSettings"):
        run_batch_vfl({"epochs": 1}, tmp_path, seed=0)
    with pytest.raises(ConfigError, match="seed = -1"):
        run_batch_vfl(BatchVFLSettings(), tmp_path, seed=-1)


def test_parties_check_the_messages_they_receive():
    torch.manual_seed(0)
    client = BatchClient(1, torch.nn.Linear(3, 2), lr=0.1)
    with pytest.raises(ProtocolError, match="pending embedding is for round None"):
        client.on_gradient(Gradient(0, 1, np.zeros((4, 2), np.float32)))
    e = client.embed(5, torch.ones(4, 3))
    assert e.values.shape == (4, 2) and (e.round, e.client) == (5, 1)
    with pytest.raises(ProtocolError, match="gradient for round 6"):
        client.on_gradient(Gradient(6, 1, np.zeros((4, 2), np.float32)))
    with pytest.raises(ProtocolError, match=r"shape \(3, 2\)"):
        client.on_gradient(Gradient(5, 1, np.zeros((3, 2), np.float32)))
    before = client.model.weight.detach().clone()
    client.on_gradient(Gradient(5, 1, np.ones((4, 2), np.float32)))
    assert not torch.equal(before, client.model.weight)  # one SGD step on the received gradient
    server = BatchServer(torch.nn.Linear(4, 3), n_clients=2, embedding=2, lr=0.1)
    good = [Embedding(0, m, np.zeros((4, 2), np.float32)) for m in range(2)]
    loss, grads = server.train_step(0, good, torch.zeros(4, dtype=torch.long))
    assert loss > 0 and [g.values.shape for g in grads] == [(4, 2), (4, 2)]
    with pytest.raises(ProtocolError, match="expected client 1's embedding for round 0 of shape"):
        server.train_step(
            0, [good[0], Embedding(0, 1, np.zeros((4, 3), np.float32))], torch.zeros(4, dtype=torch.long)
        )
    with pytest.raises(ProtocolError, match="expected 2 embeddings, received 1"):
        server.predict(0, good[:1], 4)


def test_paper_table_reports_traffic_saved_against_none():
    from fedstream.vfl.paper import CONFIGS, PAPER, table

    assert (
        set(PAPER) <= set(CONFIGS)
        and CONFIGS["combination"].cache
        and CONFIGS["combination"].down == "quant-huffman"
    )
    fake = [
        {
            "name": n,
            "per_epoch": [{"test_accuracy": a}],
            "final_accuracy": a,
            "bytes_per_client": b,
            "bytes": {"up": 2 * b, "down": 2 * b},
        }
        for n, a, b in (("none", 0.9, 100e6), ("combination", 0.8, 15e6))
    ]
    lines = table(fake).splitlines()
    assert lines[2].startswith("| none | 90.00 | 90.00 | 200.0 | 200.0 | 100.00 | 0.0 % |")
    assert lines[3].endswith("| 15.00 | 85.0 % |")
