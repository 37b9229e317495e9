"""Online VFL on PyTorch parties (``model.backend = "torch"``): the same errors and weights as the
compiled engine on its own MLPs, your own models, checkpoints, compression, topl and the deployment."""

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.errors import ConfigError
from fedstream.ovfl.engine import OnlineVFL
from fedstream.ovfl.torch_parties import TorchClient, TorchServer
from tests.helpers.ovfl_deploy import loopback_run, overrides, party_models

GELU = "tests.helpers.own_models:gelu_bottom"
TOP = "tests.helpers.own_models:top"


def config(root, backend, **more):
    return load_config(None, overrides(root, 300) | {"model.backend": backend, "simulator.path": "messages",
                                                      "checkpoint.every": 0} | more)


def params(run):
    out = {"server": run.server.model.parameters()}
    return out | {f"client{m}": c.model.parameters() for m, c in enumerate(run.clients)}


@pytest.mark.parametrize("more", [
    {"optimizer.name": "ogd"},
    {"optimizer.name": "dlr", "optimizer.window": 5, "optimizer.alpha": 0.8},
    {"optimizer.name": "slr", "optimizer.window": 4},
    {"activation.name": "full", "compression.up": "topk", "compression.down": "quant-huffman"},
], ids=["ogd", "dlr", "slr", "compressed"])
def test_torch_parties_on_the_builtin_mlp_equal_the_compiled_engine(mnist_root, more):
    compiled = OnlineVFL(config(mnist_root, "numba", **more))
    torch_run = OnlineVFL(config(mnist_root, "torch", **more))
    want, got = compiled.run(), torch_run.run()
    assert isinstance(torch_run.clients[0], TorchClient) and isinstance(torch_run.server, TorchServer)
    # float rounding may flip a prediction or so in 100
    np.testing.assert_allclose(got["interval_errors"], want["interval_errors"], atol=1 / 100)
    assert got["bytes"] == want["bytes"]
    for party, arrays in params(compiled).items():
        for a, b in zip(arrays, params(torch_run)[party]):
            np.testing.assert_allclose(b, a, atol=2e-4, err_msg=party)


def test_the_fused_path_equals_the_torch_backend_too(mnist_root):
    fused = OnlineVFL(config(mnist_root, "numba", **{"simulator.path": "auto"})).run()
    assert OnlineVFL(config(mnist_root, "torch", **{"simulator.path": "auto"})).run()["interval_errors"] == \
        pytest.approx(fused["interval_errors"], abs=1 / 100)


def test_own_models_learn_checkpoint_and_resume(mnist_root, tmp_path):
    cfg = config(mnist_root, "torch", **{"model.client": GELU, "model.server": TOP, "rounds": 400,
                                        "activation.name": "full"})
    whole = OnlineVFL(dict(cfg)).run()
    assert whole["accumulated_error"] < 0.5  # 10 classes; a model that does not learn errs 0.9
    first = OnlineVFL(dict(cfg))
    first.run(200, checkpoint_path=tmp_path / "checkpoint.npz")
    resumed = OnlineVFL(dict(cfg))
    resumed.load(tmp_path / "checkpoint.npz")
    assert resumed.run()["interval_errors"] == whole["interval_errors"]
    assert resumed.run.__self__.t == 400


def test_topl_pads_the_torch_parties_as_the_compiled_ones(mnist_root):
    more = {"vfl.clients": 3, "activation.name": "topl", "activation.l": 2, "activation.explore": 3,
            "activation.window": 40}
    want = OnlineVFL(config(mnist_root, "numba", **more)).run()
    got = OnlineVFL(config(mnist_root, "torch", **more)).run()
    assert got["bytes"] == want["bytes"]
    np.testing.assert_allclose(got["interval_errors"], want["interval_errors"], atol=2 / 100)


def test_the_deployment_runs_torch_parties_as_the_simulator(mnist_root):
    cfg = config(mnist_root, "torch", **{"model.client": GELU, "rounds": 200})
    simulated = OnlineVFL(dict(cfg))
    simulated.run()
    net, reports = loopback_run(dict(cfg))
    deployed = party_models(net, reports)
    for party, arrays in params(simulated).items():
        for a, b in zip(arrays, deployed[party]):
            np.testing.assert_allclose(b, a, atol=1e-5, err_msg=party)


def test_own_models_need_the_torch_backend_and_must_fit(mnist_root):
    with pytest.raises(ConfigError, match='model.client = "tests.helpers.own_models:gelu_bottom" needs '
                                          'model.backend = "torch"'):
        config(mnist_root, "numba", **{"model.client": GELU})
    with pytest.raises(ConfigError, match="cannot import module"):
        config(mnist_root, "torch", **{"model.server": "no_such_package.models:top"})
    bad = config(mnist_root, "torch", **{"model.client": "tests.helpers.own_models:wrong_width"})
    with pytest.raises(ConfigError, match=r"\(client 0\): on an input of shape \(2, 392\) the model returns "
                                          r"shape \(2, 9\), expected \(2, 8\)"):
        OnlineVFL(bad)
