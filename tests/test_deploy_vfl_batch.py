"""Batch VFL (the compression paper's split learning) across processes on Flower gives the simulator's
results.

The server party runs the simulator's epoch loop (:func:`fedstream.vfl.trainer.play_epochs`)
over :class:`fedstream.vfl.deploy.proxy.RemoteCohort`; each node hosts one client
(:class:`fedstream.vfl.deploy.host.BatchVFLHost`) fed only its own strip of the images.
Checked against the in-process simulator on MNIST (tiny settings):

* the deployment's code over an in-process link, every node rebuilt from its saved state for
  every request (as on a SuperNode), the server holding only the labels: same final models, test
  accuracy, per-epoch rows and bytes per client and direction, uncompressed and with top-k + cache
  up and quantised Huffman-coded gradients down;
* the same ServerApp/ClientApp on Flower's simulation runtime;
* a node holds only its own strip, the server only the labels.

Malformed replies and requests: ``test_deploy_vfl_batch_malformed.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedstream.errors import ConfigError
from fedstream.vfl.data import load_vertical
from fedstream.vfl.deploy.data import batch_settings, load_block, load_labels
from fedstream.vfl.trainer import (
    run_batch_vfl,
)
from tests.helpers.flower import simulated_summary
from tests.helpers.models import assert_same_models
from tests.helpers.vfl_deploy import (
    ATOL,
    COMPRESSED,
    VFL_TINY,
    assert_same_run,
    deploy_vfl,
    deployed_models,
    simulate_vfl,
    vfl_tiny_config,
)


@pytest.fixture(scope="module")
def simulated(data_root):
    config = vfl_tiny_config(data_root)
    return config, *simulate_vfl(config)


# -- the deployment's code over an in-process link ------------------------------------------------
def test_loopback_deployment_equals_the_simulator(data_root, simulated, tmp_path):
    config, want, want_models = simulated
    net, got, link = deploy_vfl(config, data_root, tmp_path)
    assert got["faults"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    M, steps, msg = 3, 4, 11 + 4 * 50 * 16  # 200 rows in batches of 50; a plain (50, 16) float32 message
    assert got["bytes"]["per_client"] == [{"up": steps * msg, "down": steps * msg}] * M
    assert got["eval_bytes_up"] == M * 2 * msg  # 100 test rows in 2 batches, up only
    assert link.requests == M * (1 + steps + 1 + 1)  # setup, one per step, one evaluation, finish
    assert [(c["up"], c["down"], c["eval_up"]) for c in got["clients"]] == [
        (steps * msg, steps * msg, 2 * msg)
    ] * M
    assert sorted(p.name for p in (tmp_path / "nodes").glob("*.npz")) == sorted(
        f"ckpt-{net.cohort.run_token}-{m}.npz" for m in range(M)
    )  # each node's state, saved after every request
    # and the simulator's own entry point agrees
    assert_same_run(run_batch_vfl(batch_settings(config), data_root, seed=config["seed"]), want)


def test_compressed_loopback_deployment_equals_the_simulator(data_root, tmp_path):
    """Top-k with the server's per-sample cache up, 3-sigma quantised Huffman-coded gradients down:
    the codecs' state lives with the party that owns it, on both sides of the wire."""
    config = vfl_tiny_config(data_root, **COMPRESSED, **{"train.epochs": 2})
    want, want_models = simulate_vfl(config)
    net, got, _ = deploy_vfl(config, data_root, tmp_path)
    assert got["faults"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    k = 2  # ceil(0.125 * 16) entries per row
    per_step_up = 12 + 1 + 50 * 16 // 8 + 4 * 50 * k  # compressed header, codec, bitmap, values
    assert got["bytes"]["per_client"][0]["up"] == 2 * 4 * per_step_up
    assert 0 < got["bytes"]["per_client"][0]["down"] < 2 * 4 * (11 + 4 * 50 * 16) / 4
    assert net.cohort.ends[0].receiver.table is not None  # the cache sits at the server's end


def test_compression_options_deployed_equal_the_simulator(data_root, tmp_path):
    """Error feedback keyed by sample (the node passes its rows' dataset ids, test rows after the
    training ones, as the simulator), float16 values, clipped outliers, stochastic rounding (draws
    keyed by client and count): the same run on the wire."""
    options = {"compression.up": "topk-grad", "compression.cache": True, "compression.feedback": True,
               "compression.value_dtype": "float16", "compression.down": "quant-huffman",
               "compression.outliers": "clip", "compression.rounding": "stochastic",
               "compression.width": 5.0}
    config = vfl_tiny_config(data_root, **options, **{"train.epochs": 2})
    want, want_models = simulate_vfl(config)
    net, got, _ = deploy_vfl(config, data_root, tmp_path)
    assert got["faults"] == []
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)


def test_topk_grad_ranking_lives_on_the_node(data_root, tmp_path):
    """topk-grad ranks by the last gradient the node received: state saved on the node between messages."""
    config = vfl_tiny_config(data_root, **{"compression.up": "topk-grad", "compression.down": "sign-scaled"})
    want, want_models = simulate_vfl(config)
    net, got, _ = deploy_vfl(config, data_root, tmp_path)
    assert_same_run(got, want)
    assert_same_models(deployed_models(net), want_models, atol=ATOL)


def test_server_side_selection_equals_the_simulator(data_root, tmp_path):
    """Fixed and random participant selection (with a dynamic row subset) run on the server: the
    unselected nodes get no request, the server pads them."""
    for extra in ({"selection.method": "fixed", "selection.clients": "0,2", "selection.padding": "mean"},
                  {"selection.method": "random", "selection.l": 2, "selection.dynamic": "discrete",
                   "selection.keep": 0.5, "selection.update_prob": 1.0, "train.epochs": 2}):
        config = vfl_tiny_config(data_root, **extra)
        want, want_models = simulate_vfl(config)
        net, got, _ = deploy_vfl(config, data_root, tmp_path / extra["selection.method"])
        assert got["faults"] == []
        assert_same_run(got, want)
        assert [e["clients"] for e in got["selection"]["events"]] == [
            e["clients"] for e in want["selection"]["events"]
        ]
        assert_same_models(deployed_models(net), want_models, atol=ATOL)


# -- what each party holds --------------------------------------------------------------------------
def test_a_node_loads_only_its_own_strip_and_the_server_only_labels(data_root, tmp_path):
    config = vfl_tiny_config(data_root, **{"vfl.split": "columns"})
    s = batch_settings(config)
    data = load_vertical(s, data_root)
    widths = [10, 9, 9]  # 28 pixel columns over 3 clients
    for m in range(s.clients):
        block = load_block(config, m, cache_dir=tmp_path)
        cached = load_block(config, m, cache_dir=tmp_path)  # read back from the node's cache
        assert block.train_x.shape == (200, 1, 28, widths[m]) and block.test_x.shape == (
            100,
            1,
            28,
            widths[m],
        )
        assert np.array_equal(cached.train_x, block.train_x)
        idx = np.array([5, 0, 17])
        assert torch.equal(
            block.inputs("train", idx), data.client_inputs(data.train_x[idx])[m]
        )  # same values
        assert torch.equal(block.inputs("test", idx), data.client_inputs(data.test_x[idx])[m])
    assert len(list(tmp_path.glob("vfl-*.npz"))) == s.clients
    labels = load_labels(config, str(data_root))
    assert np.array_equal(labels.train_y, data.train_y) and np.array_equal(labels.test_y, data.test_y)
    assert set(vars(labels)) == {"dataset", "train_y", "test_y", "n_classes", "ids", "classes",
                                 "alignment"}  # no pixel
    assert labels.ids is None and labels.classes is None and labels.alignment is None  # per-party files' only
    with pytest.raises(ConfigError, match="client-index = 3"):
        load_block(config, 3)


def test_every_batch_vfl_setting_deploys_and_a_bad_one_is_refused_by_the_config(data_root):
    """No batch VFL setting is refused for the network (dynamic VF-PS and compression included); a
    misspelt one is refused before anything is deployed."""
    from fedstream.deploy.adapters import check_deployable

    with pytest.raises(
        ConfigError, match="selection.dynamic = 'sometimes' is out of range; expected one of none"
    ):
        vfl_tiny_config(
            data_root, **{"selection.method": "vfps", "selection.dynamic": "sometimes"}
        )  # before deploying
    check_deployable(
        vfl_tiny_config(data_root, **{"selection.method": "vfps"})
    )  # static VF-PS runs (test_deploy_vfps.py)
    check_deployable(
        vfl_tiny_config(data_root, **{"selection.method": "vfps", "selection.dynamic": "relaxed"})
    )  # dynamic too
    check_deployable(vfl_tiny_config(data_root, **COMPRESSED))  # compression is fine


# -- on Flower ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_flower_simulation_runtime_equals_the_simulator(data_root, simulated, tmp_path):
    """The ServerApp and ClientApps on Flower's simulation runtime (Ray): messages as RecordDicts
    through Flower's LinkState, node state through ``context.state``."""
    config, want, want_models = simulated
    got, out = simulated_summary(
        "vfl-mnist", VFL_TINY | {"data.root": str(data_root)}, config["vfl.clients"], timeout=240,
        tmp_path=tmp_path,
    )
    assert_same_run(got, json.loads(json.dumps(want)))  # the summary went through JSON
    with np.load(out / "models.npz") as z:
        assert_same_models({k: z[k] for k in z.files}, want_models, atol=ATOL)
