"""CHFL's FedAvg (batch mode) across processes on Flower gives the simulator's results.

The server party runs the simulator's round loop (:class:`fedstream.chfl.trainer.BatchRun`) over
:class:`fedstream.chfl.deploy.proxy.RemoteCohort`; each node hosts one client
(:class:`fedstream.chfl.deploy.host.CHFLHost`) fed only its own rows and columns. Checked against
the in-process simulator on covertype (tiny settings):

* the deployment's code over an in-process link, every node rebuilt from its saved state for
  every request (as on a SuperNode), the server without any data: same choices, test accuracies,
  final global common column and bytes per client and direction;
* the same ServerApp/ClientApp on Flower's simulation runtime;
* malformed replies (shapes, NaN, round, choices) are rejected and recorded, never used; malformed
  requests are refused by the node, which then changes nothing;
* a node holds only its own part of the data.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedstream.chfl.deploy.data import chfl_config_settings, load_part
from fedstream.chfl.deploy.host import CHFLHost
from fedstream.chfl.plan import prepare
from fedstream.chfl.trainer import run_chfl
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope
from fedstream.errors import ProtocolError
from fedstream.transport.tensors import decode_update, encode_update
from fedstream.transport.updates import ModelUpdate
from tests.helpers.chfl_deploy import (
    CHFL_TINY,
    assert_same_result,
    chfl_tiny_config,
    deploy_chfl,
    simulate_chfl,
)
from tests.helpers.crashing import scaled_timeout
from tests.helpers.flower import flower_app, simulated_summary
from tests.helpers.links import spoiling


@pytest.fixture(scope="module")
def simulated(covertype_root):
    config = chfl_tiny_config(covertype_root)
    return config, *simulate_chfl(config)


# -- the deployment's code over an in-process link ------------------------------------------------
def test_loopback_deployment_equals_the_simulator(covertype_root, simulated, tmp_path):
    config, want, want_common = simulated
    net, got, link = deploy_chfl(config, covertype_root, tmp_path)
    assert_same_result(got, want)  # choices, test accuracies of every variant, bytes per client and direction
    assert got["variants"]["chfl"]["choices"] == want["variants"]["chfl"]["choices"]
    assert (
        got["bytes"]["per_client"] == want["bytes"]["per_client"]
        and got["bytes"]["messages"] == want["bytes"]["messages"]
    )
    common = net.global_common()
    assert list(common) == list(want_common)
    for k, v in want_common.items():
        np.testing.assert_allclose(common[k], v, rtol=0, atol=1e-6)
    K, s = config["chfl.clients"], chfl_config_settings(config)
    assert got["faults"] == [] and link.requests == K * (1 + len(s.lrs) * (s.rounds + 1) + 1)
    assert [(c["up"], c["down"]) for c in got["clients"]] == [
        (p["up"], p["down"]) for p in want["bytes"]["per_client"]
    ]
    assert sorted(p.name for p in (tmp_path / "nodes").glob("*.npz")) == sorted(
        f"ckpt-{net.cohort.run_token}-{m}.npz" for m in range(K)
    )  # each node's state, saved after every request
    # and the simulator's own entry point agrees
    assert_same_result(run_chfl(s, covertype_root, method=config["chfl.method"], seed=config["seed"]), want)


def test_loopback_deployment_of_a_baseline_equals_the_simulator(covertype_root, tmp_path):
    """The Local baseline sends no model at all; FedProx sends the same messages as chfl."""
    for method in ("local", "fedprox"):
        config = chfl_tiny_config(covertype_root, **{"chfl.method": method, "chfl.lrs": "0.01,0.003"})
        want, _ = simulate_chfl(config)
        _, got, _ = deploy_chfl(config, covertype_root, tmp_path / method)
        assert_same_result(got, want)
    assert got["bytes"]["total"] > 0


# -- malformed messages -----------------------------------------------------------------------------
def spoil_at(spoil, request=(ROUND, 1), victim: int = 1):
    """A link whose node ``victim`` answers ``request`` (kind, round) with ``spoil(reply)``."""
    return spoiling(lambda m, env: m == victim and (env.kind, env.round) == request, spoil)


def _respoil(reply: Envelope, **change) -> Envelope:
    msg = decode_update(reply.parts[0])
    tensors = dict(msg.tensors)
    if "tensors" in change:
        tensors = change.pop("tensors")(tensors)
    data = encode_update(msg._replace(tensors=tensors, **change))
    return Envelope(reply.kind, reply.round, [data], dict(reply.info))


def _shrink(tensors):
    name = next(iter(tensors))
    return tensors | {name: tensors[name][:, :-1].copy()}


def _nan(tensors):
    name = list(tensors)[-1]
    bad = tensors[name].copy()
    bad.flat[0] = np.nan
    return tensors | {name: bad}


SPOILS = {
    "shape": (lambda r: _respoil(r, tensors=_shrink), r"do not fit the global common column"),
    "nan": (lambda r: _respoil(r, tensors=_nan), r"holds NaN or inf"),
    "round": (
        lambda r: _respoil(r, round=0),
        r"expected client 1's model for round 1, received client 1's for round 0",
    ),
    "sender": (
        lambda r: _respoil(r, client=2),
        r"expected client 1's model for round 1, received client 2's",
    ),
    "samples": (lambda r: _respoil(r, n_samples=10**6), r"the model says 1000000 samples, the node reported"),
    "reply round": (
        lambda r: Envelope(ROUND, 0, r.parts, r.info),
        r"expected a 'round' reply for round 1, received",
    ),
    "accuracy": (lambda r: Envelope(r.kind, r.round, r.parts, r.info | {"val": float("nan")}), r"info 'val'"),
    "garbage": (lambda r: Envelope(r.kind, r.round, [b"\x10" + bytes(20)], r.info), r"ModelUpdate|bytes"),
}


@pytest.mark.parametrize("kind", list(SPOILS))
def test_a_malformed_reply_is_rejected_recorded_and_left_out(covertype_root, simulated, tmp_path, kind):
    """Client 1's round-1 reply is spoilt: the server records the fault with a clear reason, leaves
    client 1 out of that round's FedAvg (and the metrics), and the run completes."""
    config, want, _ = simulated
    spoil, reason = SPOILS[kind]
    link_cls = spoil_at(spoil)
    _, got, _ = deploy_chfl(config, covertype_root, tmp_path, link_cls)
    assert [(f["client"], f["round"], f["request"]) for f in got["faults"]] == [(1, 1, ROUND)], got["faults"]
    assert __import__("re").search(reason, got["faults"][0]["reason"]), got["faults"][0]["reason"]
    assert (
        got["bytes"]["per_client"][0] == want["bytes"]["per_client"][0]
    )  # the others' messages are unchanged
    assert (
        got["bytes"]["per_client"][1]["up"] < want["bytes"]["per_client"][1]["up"]
    )  # the spoilt one is not counted
    assert len(got["test_acc_per_client"]) == 3


def test_malformed_choices_are_rejected(covertype_root, simulated, tmp_path):
    config, _, _ = simulated

    def spoil(reply):
        choices = json.loads(reply.info["choices"])
        choices["mu>0"]["candidate"] = "mu=0"  # not a μ > 0 candidate
        return Envelope(reply.kind, reply.round, [], reply.info | {"choices": json.dumps(choices)})

    link_cls = spoil_at(spoil, (FINISH, 2))
    _, got, _ = deploy_chfl(config, covertype_root, tmp_path, link_cls)
    assert [(f["client"], f["request"]) for f in got["faults"]] == [(1, FINISH)]
    assert "variant 'mu>0': malformed choice" in got["faults"][0]["reason"]
    assert len(got["test_acc_per_client"]) == 2  # clients 0 and 2


def test_rounds_without_any_valid_update_end_the_run_with_a_clear_error(covertype_root, simulated,
                                                                       tmp_path):
    """Every update NaN: round 0's θ carries over (a round's replies may all be lost once:
    test_deploy_chfl_faults.py), a second such round in a row ends the run."""
    config, _, _ = simulated

    all_spoilt = spoiling(lambda m, env: env.kind == ROUND,
                          lambda r: _respoil(r, tensors=_nan) if r.parts else r)

    with pytest.raises(ProtocolError, match=r"federation 0, round 1: no client sent a valid model update, "
                                            r"nor in round 0"):
        deploy_chfl(config, covertype_root, tmp_path, all_spoilt)


def test_a_node_refuses_a_malformed_request_and_changes_nothing(covertype_root):
    config = chfl_tiny_config(covertype_root)
    part = load_part(config, 0)
    host = CHFLHost(config, 0, rows=part)
    sizes = host.handle(Envelope(SETUP, 0)).info
    from fedstream.chfl.models import Column, state_arrays

    theta = state_arrays(Column(sizes["n_common"], sizes["n_classes"], (16, 8)))
    good = {"lr_index": 0, "validate": False, "epochs": 1}
    bad_requests = {
        "shape": (
            Envelope(ROUND, 0, [encode_update(ModelUpdate(0, 0, _shrink(theta), 0))], good),
            "do not fit its common column",
        ),
        "nan": (Envelope(ROUND, 0, [encode_update(ModelUpdate(0, 0, _nan(theta), 0))], good), "NaN"),
        "recipient": (
            Envelope(ROUND, 0, [encode_update(ModelUpdate(0, 1, theta, 0))], good),
            "received client 1's for round 0",
        ),
        "round": (
            Envelope(ROUND, 1, [encode_update(ModelUpdate(0, 0, theta, 0))], good),
            "received client 0's for round 0",
        ),
        "lr_index": (
            Envelope(ROUND, 0, [encode_update(ModelUpdate(0, 0, theta, 0))], good | {"lr_index": 5}),
            "lr_index",
        ),
        "epochs": (
            Envelope(ROUND, 0, [encode_update(ModelUpdate(0, 0, theta, 0))], good | {"epochs": 7}),
            "epochs",
        ),
        "no model": (Envelope(ROUND, 0, [], good), "expected 1 model message"),
    }
    before = host.state_dict()["chfl"].tobytes()
    for name, (env, reason) in bad_requests.items():
        with pytest.raises(ProtocolError, match=reason):
            host.handle(env)
        assert host.state_dict()["chfl"].tobytes() == before, name
    reply = host.handle(Envelope(ROUND, 0, [encode_update(ModelUpdate(0, 0, theta, 0))], good))
    assert decode_update(reply.parts[0]).n_samples == sizes["n_train"]
    with pytest.raises(ProtocolError, match="requests must move forward"):  # round 0 again
        host.handle(Envelope(ROUND, 0, [encode_update(ModelUpdate(0, 0, theta, 0))], good))


# -- what a node holds ------------------------------------------------------------------------------
def test_a_node_loads_only_its_own_rows_and_columns(covertype_root, tmp_path):
    config = chfl_tiny_config(covertype_root)
    s = chfl_config_settings(config)
    from fedstream.data.chfl_datasets import load_chfl_dataset

    table = load_chfl_dataset(s.dataset, covertype_root).table
    ex = prepare(table.X, table.y, s, method="chfl", seed=config["seed"], n_classes=7)
    for m in range(s.clients):
        part = load_part(config, m, cache_dir=tmp_path)
        cached = load_part(config, m, cache_dir=tmp_path)  # read back from the node's cache
        n_common, n_unique = len(ex.features.common), len(ex.features.unique[m])
        for split in ("train", "val", "test"):
            mine, sim, again = (
                getattr(part.data, split),
                getattr(ex.data[m], split),
                getattr(cached.data, split),
            )
            rows = sim.y.shape[0]
            assert mine.xc.shape == (rows, n_common) and mine.xu.shape == (rows, n_unique)
            for a, b, c in zip(mine, sim, again):
                assert np.array_equal(a.numpy(), b.numpy()) and np.array_equal(c.numpy(), b.numpy())
        assert part.data.train.y.shape[0] + part.data.val.y.shape[0] < 600 / 3  # its share of train+val only
        assert part.data.test.y.shape[0] == 600 - round(0.6 * 600) - round(0.2 * 600)  # the shared test rows
        assert part.sizes()["n_features"] == table.X.shape[1] and n_common + n_unique < table.X.shape[1]
    assert len(list(tmp_path.glob("chfl-*.npz"))) == s.clients


# -- on Flower ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_flower_simulation_runtime_equals_the_simulator(covertype_root, simulated, tmp_path):
    """The ServerApp and ClientApps on Flower's simulation runtime (Ray): messages as RecordDicts
    through Flower's LinkState, node state through ``context.state``."""
    config, want, want_common = simulated
    got, out = simulated_summary(
        "chfl-covertype",
        CHFL_TINY | {"data.root": str(covertype_root)},
        config["chfl.clients"],
        timeout=scaled_timeout(600),
        tmp_path=tmp_path,
    )
    assert_same_result(got, json.loads(json.dumps(want)))  # the summary went through JSON
    with np.load(out / "models.npz") as z:
        assert sorted(z.files) == sorted(f"global.{k}" for k in want_common)
        for k, v in want_common.items():
            np.testing.assert_allclose(z[f"global.{k}"], v, rtol=0, atol=1e-6)


@pytest.mark.slow
def test_real_local_flower_deployment_equals_the_simulator(covertype_root, simulated, tmp_path):
    """SuperLink + 3 SuperNodes as subprocesses on 127.0.0.1, ``flwr run`` (a fresh ClientApp
    process per message: 5 requests per node, about 2.5 minutes here)."""
    pytest.importorskip("flwr", reason="Flower is the optional extra: pip install 'fedstream[flower]'")
    from fedstream.deploy.local import LocalDeployment

    config, want, want_common = simulated
    out = tmp_path / "out"
    app = flower_app(tmp_path / "app", "chfl-covertype", CHFL_TINY | {"data.root": str(covertype_root)}, out,
                     audit=True, reply_timeout=scaled_timeout(120.0))
    with LocalDeployment(config["chfl.clients"], tmp_path / "deployment") as deployment:
        result = deployment.run(app, timeout=scaled_timeout(900))
    log = (tmp_path / "deployment" / "flwr-run.log").read_text(errors="replace")
    assert result.returncode == 0 and (out / "summary.json").exists(), log[-3000:]
    got = json.loads((out / "summary.json").read_text())
    assert got["faults"] == []
    assert_same_result(got, json.loads(json.dumps(want)))
    with np.load(out / "models.npz") as z:
        for k, v in want_common.items():
            np.testing.assert_allclose(z[f"global.{k}"], v, rtol=0, atol=1e-6)
