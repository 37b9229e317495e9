"""``fedstream bench ovfl --forms``: the per-layer cost table of DLR's update forms against OGD's."""

import json

import numpy as np

from fedstream.bench.dlr_forms import (
    FORMS,
    KINDS,
    dlr_defers,
    form_costs,
    format_form_costs,
    model_layers,
    second_matrix_pass,
)
from fedstream.cli import main
from fedstream.models import MLP
from fedstream.optim import DLR
from fedstream.ovfl.engine import OnlineVFL
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream


def test_second_matrix_pass_is_w_minus_c_s():
    rng = np.random.default_rng(0)
    W, S = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((5, 7)).astype(np.float32)
    want = W - np.float32(0.25) * S
    second_matrix_pass(W, S, 0.25)
    np.testing.assert_allclose(W, want, rtol=1e-6)


def test_model_layers_counts_each_kind_of_layer_once():
    run = OnlineVFL(small_config(**{"activation.name": "full"}), stream=synthetic_stream())
    layers = model_layers(run)
    client, server = run.clients[0].model.layers[0], run.server.model.layers
    assert [(r["out"], r["in"], r["count"], r["input_grad"]) for r in layers] == [
        (*client.W.shape, 4, False), (*server[0].W.shape, 1, True), (*server[1].W.shape, 1, True)]


def test_dlr_defers_is_dlrs_choice_on_the_paper_model():
    """The table's 'picked' column asks DLR itself. On the paper model (clients 196->64, server
    256->256->10) DLR defers the clients' and the server's first layer at l = 10 and no layer at
    l = 100 or 150: the paper tables' l = 10 runs depend on that choice bit for bit."""
    shapes = [(64, 196), (256, 256), (10, 256)]
    picks = {w: [dlr_defers({"out": o, "in": i, "relu": True}, w) for o, i in shapes] for w in (10, 100, 150)}
    assert picks == {10: [True, True, False], 100: [False] * 3, 150: [False] * 3}
    model = MLP([196, 64], relu_last=True, rng=np.random.default_rng(1))
    assert DLR(model, lr=0.1, window=10, alpha=0.5).deferred_layers == [0]


def test_form_costs_table():
    cfg = small_config(**{"activation.name": "full"})
    res = form_costs(cfg, (3, 40), stream=synthetic_stream(), calls=3, repeats=1, ogd_rounds=64)
    assert res["ogd_round_us"] > 0 and [w["window"] for w in res["windows"]] == [3, 40]
    for w in res["windows"]:
        assert set(w["per_round_us"]) == set(FORMS)
        for row in w["layers"]:
            t, extra = row["us"], row["extra"]
            assert set(t) == set(KINDS) and min(t.values()) >= 0.0
            assert (t["input_grad"] == 0.0) == (not row["input_grad"])
            assert extra["dense_floor"] == t["second_matrix_pass"] - t["ogd_step"]
            assert extra["running_sum"] == t["running_sum_step"] - t["ogd_step"]
            assert row["cheaper"] == min(("running_sum", "deferred"), key=extra.__getitem__)
        total = sum(r["count"] * r["extra"]["running_sum"] for r in w["layers"])
        assert np.isclose(w["per_round_us"]["running_sum"], total)
        floor = min(w["per_round_us"]["dense_floor"], w["per_round_us"]["factored_floor"])
        assert np.isclose(w["dlr_over_ogd_at_most"], res["ogd_round_us"] / (res["ogd_round_us"] + floor))
    lines = format_form_costs(res)
    assert len(lines) == 2 + sum(len(w["layers"]) + 2 for w in res["windows"]) + 1
    assert all(len(line) <= 80 for line in lines)


def test_cli_bench_ovfl_forms(data_root, tmp_path, capsys):
    """``fedstream bench ovfl --forms`` prints the table of the paper model and writes its figures."""
    out = tmp_path / "forms.json"
    assert main(["bench", "ovfl", "--forms", "--data-root", str(data_root), "--json", str(out)]) == 0
    res = json.loads(out.read_text())["layer_forms"]
    assert [w["window"] for w in res["windows"]] == [10, 50, 100, 150]
    assert [(r["out"], r["in"], r["count"]) for r in res["windows"][0]["layers"]] == [
        (64, 196, 4), (256, 256, 1), (10, 256, 1)]
    assert "DLR layer forms" in capsys.readouterr().out
