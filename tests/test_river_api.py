"""fedstream.ovfl.OnlineVFL, the River classifier: River's progressive validation and metrics, the
engine's accumulated error on the same rows, and the docstring examples (doctest)."""

import doctest
import json

import numpy as np
import pytest

river = pytest.importorskip("river")
from river import checks as river_checks  # noqa: E402

import fedstream.ovfl.river  # noqa: E402
from fedstream.cli import main  # noqa: E402
from fedstream.config import load_config  # noqa: E402
from fedstream.data import resolve_data_root  # noqa: E402
from fedstream.errors import FedstreamError  # noqa: E402
from fedstream.ovfl import OnlineVFL  # noqa: E402
from fedstream.ovfl.engine import feature_blocks, make_stream  # noqa: E402


def _gauss_rows(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    y = (X[:, 0] + X[:, 3] > 0).astype(int)
    return [({f"f{i}": float(v) for i, v in enumerate(row)}, int(label)) for row, label in zip(X, y)]


PARTITION = {"bank": ["f0", "f1", "f2"], "shop": ["f3", "f4", "f5"]}


def test_docstring_examples():
    """The River example of OnlineVFL's docstring (the other new modules: tests/test_predict.py)."""
    result = doctest.testmod(fedstream.ovfl.river, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_progressive_val_score_and_metrics():
    """River's progressive validation drives it; its Accuracy is 1 - the learning rounds' error
    (plain transport, window 1: the prediction equals the learning round's own)."""
    rows = _gauss_rows(400)
    model = OnlineVFL(partition=PARTITION, classes=[0, 1], activation="random", seed=3)
    metric = river.metrics.Accuracy() + river.metrics.LogLoss()
    river.evaluate.progressive_val_score(rows, model, metric)
    accuracy, logloss = metric
    assert accuracy.get() == pytest.approx(1 - model.accumulated_error, abs=1e-12)
    assert accuracy.get() > 0.8 and logloss.get() < 0.6
    assert model.rounds == 400 and model.bytes["total"] > 0 and model.inference_bytes["total"] > 0
    assert all(0.4 < r < 0.6 for r in model.activation_rate)
    proba = model.predict_proba_one(rows[0][0])
    assert set(proba) == {0, 1} and sum(proba.values()) == pytest.approx(1.0)


def test_classes_in_order_of_appearance_and_errors():
    model = OnlineVFL(partition=PARTITION)
    assert model.predict_one(_gauss_rows(1)[0][0]) is None and model.predict_proba_one({}) == {}
    x = _gauss_rows(1)[0][0]
    model.learn_one(x, "no")
    assert model.predict_proba_one(x) == {"no": 1.0}
    model.learn_one(x, "yes")
    assert set(model.predict_proba_one(x)) == {"no", "yes"}
    with pytest.raises(ValueError, match="classes="):
        model.learn_one(x, "maybe")
    with pytest.raises(ValueError, match="'f5' of client 'shop' is missing"):
        model.learn_one({k: v for k, v in x.items() if k != "f5"}, "no")
    with pytest.raises(ValueError, match="feature 'f2' = nan: expected a finite number"):
        model.learn_one(x | {"f2": float("nan")}, "no")
    with pytest.raises(ValueError, match="given to clients 'a' and 'b'"):
        OnlineVFL(partition={"a": ["f0"], "b": ["f0"]})
    with pytest.raises(ValueError, match="topl"):
        OnlineVFL(partition=PARTITION, activation="topl")


def test_clone_keeps_the_settings():
    model = OnlineVFL(partition=PARTITION, classes=[0, 1], activation="fixed", k=1, lr=0.02)
    twin = model.clone()
    assert twin.k == 1 and twin.lr == 0.02 and twin.rounds == 0


@pytest.mark.parametrize("settings", [
    {"optimizer.name": "dlr", "activation.name": "random", "activation.p": 0.5},
    {"optimizer.name": "slr", "optimizer.window": 4, "activation.name": "event", "activation.threshold": 0.0},
    {"optimizer.name": "ogd", "activation.name": "fixed", "activation.k": 1, "compression.up": "topk",
     "compression.ratio": 0.25},
])
def test_same_accumulated_error_as_fedstream_run(tmp_path, settings):
    """`fedstream run` on the HIGGS subset and the River class fed the same rows as dicts, in the
    same order, with the same settings, by River's progressive validation: the same error, bytes and
    activation rates, exactly. River's own score (predict_one before learn_one) is the same error
    with window 1 and plain float32 messages; with SLR's window or a compressed link the learning
    round predicts from the window's rows or the decoded compressed embedding, predict_one from the
    sample's own float32 embedding, so only the learning rounds' error is compared."""
    try:
        resolve_data_root(None)
    except FedstreamError as exc:  # no data folder here
        pytest.skip(f"HIGGS subset not available: {exc}")
    sets = {"rounds": 600, "vfl.clients": 3, "model.embedding": 16, "eval.interval": 200,
            "checkpoint.every": 0} | settings
    argv = ["run", "ovfl-higgs", "--quiet", "--out", str(tmp_path / "run")]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    config = load_config("ovfl-higgs", sets)
    X, y, _ = make_stream(config).batch(0, sets["rounds"])
    blocks = feature_blocks(X.shape[1], config["vfl.clients"])
    partition = {f"client{m}": [f"x{i}" for i in range(b.start, b.stop)] for m, b in enumerate(blocks)}
    compression = {k.split(".", 1)[1]: v for k, v in sets.items() if k.startswith("compression.")}
    model = OnlineVFL(partition=partition, classes=[0, 1], model="deep", optimizer=config["optimizer.name"],
                      lr=config["optimizer.lr"], window=config["optimizer.window"],
                      alpha=config["optimizer.alpha"], activation=config["activation.name"],
                      p=config["activation.p"], threshold=config["activation.threshold"],
                      k=config["activation.k"], embedding=config["model.embedding"],
                      compression=compression, seed=config["seed"])
    rows = [({f"x{i}": float(v) for i, v in enumerate(row)}, int(label)) for row, label in zip(X, y)]
    accuracy = river.evaluate.progressive_val_score(rows, model, river.metrics.Accuracy())
    assert model.accumulated_error == summary["accumulated_error"]
    if config["optimizer.name"] != "slr" and not compression:  # predict_one = the round's prediction
        assert accuracy.get() == pytest.approx(1 - summary["accumulated_error"], abs=1e-12)
    assert model.bytes == summary["bytes"]
    assert model.activation_rate == summary["activation_rate"]


@pytest.mark.parametrize("settings, message", [
    ({"lr": 0}, "lr = 0: expected a number > 0"),
    ({"optimizer": "adam"}, "optimizer = 'adam': expected one of ogd, slr, dlr"),
    ({"p": 1.5}, "p = 1.5"),
    ({"activation": "fixed", "k": 3}, "activation.k = 3 exceeds vfl.clients = 2"),
    ({"compression": {"up": "gzip"}}, "compression.up"),
    ({"compression": {"upp": "topk"}}, "compression keys \\['upp'\\]"),
])
def test_bad_settings_name_the_keyword(settings, message):
    with pytest.raises(ValueError, match=message):
        OnlineVFL(partition=PARTITION, **settings)


def test_river_estimator_checks():
    """River's own contract checks for classifiers (pickling, clone, purity of predict_one,
    emerging and disappearing features, binary probabilities), on its Phishing stream."""
    for params in OnlineVFL._unit_test_params():
        river_checks.check_estimator(OnlineVFL(**params))


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("settings, message", [
    ({"lr": INF}, "lr = inf: expected a number > 0.0"),
    ({"lr": NAN}, "lr = nan"),
    ({"server_lr": INF}, "server_lr = inf"),
    ({"activation": "event", "threshold": NAN}, "threshold = nan: expected a finite number"),
    ({"activation": "event", "threshold": -INF}, "threshold = -inf"),
    ({"alpha": NAN}, "alpha = nan"),
    ({"compression": {"up": "topk", "ratio": NAN}}, "compression.ratio = nan"),
    ({"compression": {"down": "quant-huffman", "width": INF}}, "compression.width = inf"),
    ({"seed": 1.5}, "seed = 1.5: expected an integer >= 0"),
    ({"window": 2.0}, "window = 2.0: expected an integer"),
    ({"embedding": True}, "embedding = True"),
])
def test_non_finite_and_mistyped_keywords_are_refused_by_name(settings, message):
    """River keywords go through the config fields' rules (issue 29): NaN and infinities are refused
    as the config loader refuses them (before, ``threshold = nan`` and ``server_lr = inf`` were taken
    and ``lr = inf`` failed deep in the optimiser without naming the keyword)."""
    with pytest.raises(ValueError, match=message):
        OnlineVFL(partition=PARTITION, **settings)


# (keyword of OnlineVFL, its config key, values to try)
KEYWORDS = [
    ("lr", "optimizer.lr", [0.01, 1, 0, -1.0, NAN, INF, True, "0.1"]),
    ("server_lr", "optimizer.server_lr", [None, 0.5, 0.0, NAN, INF]),
    ("alpha", "optimizer.alpha", [0.5, 0.0, 1.0, NAN]),
    ("window", "optimizer.window", [1, 10, 0, 2.0, 70000]),
    ("p", "activation.p", [0.0, 1.0, 1.5, NAN]),
    ("threshold", "activation.threshold", [0.2, -3, NAN, INF, -INF, "x"]),
    ("embedding", "model.embedding", [1, 64, 0, 65536, 8.0]),
    ("seed", "seed", [0, 7, -1, 1.5, 2**63]),
    ("optimizer", "optimizer.name", ["ogd", "dlr", "adam", 1]),
]


@pytest.mark.parametrize("keyword, key, values", KEYWORDS, ids=[k for k, *_ in KEYWORDS])
def test_a_keyword_is_refused_exactly_when_the_config_loader_refuses_its_key(keyword, key, values):
    """One set of field rules: a River keyword's value is accepted exactly when ``load_config``
    accepts it for the config key it sets."""
    for value in values:
        try:
            load_config(None, {"task": "ovfl", "vfl.clients": 2, key: value})
            loader_ok = True
        except FedstreamError:
            loader_ok = False
        try:
            OnlineVFL(partition=PARTITION, **{keyword: value})
            river_ok = True
        except ValueError as exc:
            river_ok = False
            assert str(exc).startswith(f"{keyword} = "), exc
        assert river_ok == loader_ok, (keyword, value)


@pytest.mark.parametrize("key, value", [("ratio", NAN), ("ratio", INF), ("levels", 2.5), ("width", NAN),
                                        ("cache", 1), ("up", "gzip"), ("feedback", "yes")])
def test_a_compression_key_is_refused_exactly_when_the_config_loader_refuses_it(key, value):
    with pytest.raises(FedstreamError):
        load_config(None, {"task": "ovfl", f"compression.{key}": value})
    with pytest.raises(ValueError, match=f"compression.{key} = "):
        OnlineVFL(partition=PARTITION, compression={key: value})
