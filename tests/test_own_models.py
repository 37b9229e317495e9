"""Your own PyTorch models (``model.client`` / ``model.server``, the estimators' ``client_model`` /
``server_model``): batch VFL on a small CNN over image strips, checkpoints and resume, the loopback
deployment, the estimator, and one clear error for each way a factory can be wrong."""

import numpy as np
import pytest
import torch

from fedstream.config import load_config
from fedstream.errors import ConfigError
from fedstream.vfl import BatchVFLSettings, VFLClassifier, run_batch_vfl
from fedstream.vfl.data import load_vertical
from fedstream.vfl.deploy.data import batch_settings
from fedstream.vfl.trainer import build_parties
from tests.helpers import own_models
from tests.helpers.data import write_learnable_mnist_splits
from tests.helpers.vfl_deploy import ATOL, assert_same_run, deploy_vfl, deployed_models, simulate_vfl

CNN = "tests.helpers.own_models:strip_cnn"
TOP = "tests.helpers.own_models:top"
RECORDING = "tests.helpers.own_models:recording_cnn"
TINY = {"vfl.clients": 2, "data.train_rows": 200, "data.test_rows": 100, "train.epochs": 3,
        "train.batch_size": 20, "model.embedding": 8, "optimizer.lr": 0.1, "seed": 3}


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory):
    """A small learnable MNIST, both splits (class prototypes plus noise): 300 training, 100 test images."""
    return write_learnable_mnist_splits(tmp_path_factory.mktemp("data"), 300)


def tiny(root, **extra):
    return load_config("vfl-mnist", TINY | {"data.root": str(root), "model.client": CNN, "model.server": TOP}
                       | extra)


def test_factories_receive_the_documented_arguments_and_their_modules_train(mnist_root):
    own_models.CALLS.clear()
    s = BatchVFLSettings.from_config(tiny(mnist_root, **{"model.client": RECORDING}))
    clients, server = build_parties(s.resolved(), load_vertical(s.resolved(), mnist_root), seed=3)
    assert own_models.CALLS == [{"input_shape": (1, 14, 28), "embedding": 8, "client": 0, "clients": 2},
                                {"input_shape": (1, 14, 28), "embedding": 8, "client": 1, "clients": 2}]
    assert isinstance(clients[0].model[0][0], torch.nn.Conv2d) and isinstance(server.model[1], torch.nn.GELU)


def test_own_cnn_run_checkpoint_and_resume(mnist_root, tmp_path):
    """A top model with dropout: its draws are seeded by the run and carried by the checkpoint."""
    dropout = {"model.server": "tests.helpers.own_models:top_dropout"}
    settings = BatchVFLSettings.from_config(tiny(mnist_root, **dropout))
    torch.rand(7)  # what ran before in the process does not change the run
    whole = run_batch_vfl(settings, mnist_root, seed=3, out=tmp_path / "whole")
    assert whole["config"]["model.client"] == CNN and whole["final_accuracy"] > 0.4  # 10 classes: chance 0.1
    short = BatchVFLSettings.from_config(tiny(mnist_root, **dropout, **{"train.epochs": 1}))
    run_batch_vfl(short, mnist_root, seed=3, out=tmp_path / "cut")
    resumed = run_batch_vfl(settings, mnist_root, seed=3, out=tmp_path / "cut", resume=True)
    assert [r["train_loss"] for r in resumed["per_epoch"]] == [r["train_loss"] for r in whole["per_epoch"]]
    assert resumed["final_accuracy"] == whole["final_accuracy"] and resumed["bytes"] == whole["bytes"]
    # the bytes are the embeddings' (rows x embedding float32 up, the same down) plus headers
    assert whole["bytes"]["up"] > 200 * 2 * 2 * 8 * 4


def test_a_resume_with_another_model_is_refused(mnist_root, tmp_path):
    run_batch_vfl(BatchVFLSettings.from_config(tiny(mnist_root, **{"train.epochs": 1})), mnist_root, seed=3,
                  out=tmp_path)
    other = BatchVFLSettings.from_config(tiny(mnist_root, **{"model.server": None}))
    with pytest.raises(ConfigError, match="model.server"):
        run_batch_vfl(other, mnist_root, seed=3, out=tmp_path, resume=True)


def test_own_models_with_compression_deploy_as_the_simulator(mnist_root, tmp_path):
    config = tiny(mnist_root, **{"train.epochs": 1, "compression.up": "topk",
                                 "compression.down": "quant-huffman"})
    want, want_models = simulate_vfl(config)
    net, got, _ = deploy_vfl(config, mnist_root, tmp_path)
    assert_same_run(got, want)
    got_models = deployed_models(net)
    assert got_models.keys() == want_models.keys() and "client0.0.0.weight" in got_models  # the CNN's conv
    for key, value in want_models.items():
        np.testing.assert_allclose(got_models[key], value, atol=ATOL, err_msg=key)
    assert batch_settings(config).client_model == CNN


@pytest.mark.parametrize("key, value, message", [
    ("model.client", "tests.helpers.no_such_module:f", "cannot import module 'tests.helpers.no_such_module'"),
    ("model.client", "tests.helpers.own_models:missing", "has no attribute 'missing'"),
    ("model.server", "tests.helpers.own_models:NOT_CALLABLE", "is a int, not a callable"),
    ("model.server", "no-colon", 'expected a factory as "package.module:function"'),
])
def test_the_config_refuses_a_factory_that_does_not_import(mnist_root, key, value, message):
    with pytest.raises(ConfigError, match=f"{key} = .*{message}"):
        tiny(mnist_root, **{key: value})


@pytest.mark.parametrize("key, value, message", [
    ("model.client", "tests.helpers.own_models:wrong_width",
     r"model.client = tests.helpers.own_models:wrong_width \(client 0\): on an input of shape "
     r"\(2, 1, 14, 28\) the model returns shape \(2, 9\), expected \(2, 8\) = \(rows, model.embedding\)"),
    ("model.server", "tests.helpers.own_models:strip_cnn",
     r"model.server = .*strip_cnn \(server\): the factory is called with keyword arguments input_size"),
    ("model.server", "tests.helpers.own_models:positional_only", r"keyword arguments"),
    ("model.client", "tests.helpers.own_models:not_a_module", "returned a str, expected a torch.nn.Module"),
])
def test_a_model_that_does_not_fit_is_one_error_before_training(mnist_root, key, value, message):
    settings = BatchVFLSettings.from_config(tiny(mnist_root, **{key: value}))
    with pytest.raises(ConfigError, match=message):
        run_batch_vfl(settings, mnist_root, seed=3)


def test_a_top_model_with_the_wrong_class_count_names_both_shapes(mnist_root):
    def top3(*, input_size, **_):
        return torch.nn.Linear(input_size, 3)
    settings = BatchVFLSettings.from_config(tiny(mnist_root)).__class__(
        **{**vars(BatchVFLSettings.from_config(tiny(mnist_root))), "server_model": top3})
    with pytest.raises(ConfigError, match=r"returns shape \(2, 3\), expected \(2, 10\) = \(rows, classes\) "
                                          "with 10 classes"):
        run_batch_vfl(settings, mnist_root, seed=3)


def test_estimator_takes_callables():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6)).astype(np.float32)
    y = (X[:, 0] + X[:, 4] > 0).astype(int)
    seen = []

    def bottom(*, input_shape, embedding, client, **_):
        seen.append((input_shape, client))
        return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 16), torch.nn.Tanh(),
                                   torch.nn.Linear(16, embedding))

    clf = VFLClassifier(partition=[[0, 1, 2], [3, 4, 5]], epochs=8, batch_size=32, lr=0.1, embedding=4,
                        client_model=bottom, server_model=own_models.top).fit(X[:240], y[:240])
    assert seen == [((3,), 0), ((3,), 1)]
    assert clf.score(X[240:], y[240:]) > 0.85
    assert clf.get_params()["client_model"] is bottom
    with pytest.raises(ValueError, match=r"model.client = .*wrong_width \(client 0\).*expected \(2, 4\)"):
        VFLClassifier(partition=2, embedding=4, client_model=own_models.wrong_width).fit(X, y)


def test_mnist_halves_with_a_cnn(data_root):
    """The README's demonstration on real MNIST: two clients, each a CNN over half of every image."""
    config = load_config("vfl-mnist", {"vfl.clients": 2, "data.train_rows": 3000, "data.test_rows": 1000,
                                       "train.epochs": 2, "train.batch_size": 25, "optimizer.lr": 0.1,
                                       "model.client": CNN, "model.server": TOP,
                                       "data.root": str(data_root)})
    summary = run_batch_vfl(BatchVFLSettings.from_config(config), data_root, seed=0)
    assert summary["final_accuracy"] > 0.85
