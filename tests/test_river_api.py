"""fedstream.ovfl.OnlineVFL, the River classifier: River's progressive validation and metrics, the
engine's accumulated error on the same rows, and the docstring examples (doctest)."""

import doctest
import json

import numpy as np
import pytest

river = pytest.importorskip("river")
for _submodule in ("river.evaluate", "river.metrics"):  # not imported by `import river` itself
    pytest.importorskip(_submodule)
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
    strict = OnlineVFL(partition=PARTITION, missing="error")
    with pytest.raises(ValueError, match="'f5' of client 'shop' is missing"):
        strict.learn_one({k: v for k, v in x.items() if k != "f5"}, "no")
    with pytest.raises(ValueError, match="feature 'f2' = nan: expected a finite number"):
        model.learn_one(x | {"f2": float("nan")}, "no")
    with pytest.raises(ValueError, match="given to clients 'a' and 'b'"):
        OnlineVFL(partition={"a": ["f0"], "b": ["f0"]})
    with pytest.raises(ValueError, match="topl"):
        OnlineVFL(partition=PARTITION, activation="topl")
    with pytest.raises(ValueError, match="missing = 'skip': expected one of 'absent', 'zero', 'error'"):
        OnlineVFL(partition=PARTITION, missing="skip")
    with pytest.raises(ValueError, match="padding = 'median'"):
        OnlineVFL(partition=PARTITION, padding="median")


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
    """All of River's own contract checks for classifiers (pickling, clone, purity of predict_one,
    emerging, disappearing and radically disappearing features, binary probabilities), on its
    Phishing stream, with the default ``missing="absent"``."""
    model = OnlineVFL(**next(OnlineVFL._unit_test_params()))
    checks = list(river_checks.yield_checks(model))
    names = {getattr(c, "func", c).__name__ for c in checks}
    assert {"check_emerging_features", "check_disappearing_features",
            "check_radically_disappearing_features"} <= names and len(checks) >= 42
    for params in OnlineVFL._unit_test_params():
        assert "missing" not in params  # the defaults are what is checked
        river_checks.check_estimator(OnlineVFL(**params))


def test_a_client_without_any_of_its_features_is_absent():
    """A client none of whose features is in x did not observe the event: with ``full`` activation
    it is activated exactly on the events it observed, is never queried, sends and receives nothing
    on the others, and the server pads its embedding; a client with some features takes part with
    the missing ones at 0.0."""
    rows = _gauss_rows(300, seed=4)
    shop = set(PARTITION["shop"])
    stream = [({k: v for k, v in x.items() if k not in shop} if t % 3 == 0 else x, y)
              for t, (x, y) in enumerate(rows)]
    model = OnlineVFL(partition=PARTITION, classes=[0, 1], padding="mean", seed=2)
    river.evaluate.progressive_val_score(stream, model, river.metrics.Accuracy())
    observed = sum(t % 3 != 0 for t in range(300))
    assert model.rounds == 300 and model.activation_rate == [1.0, observed / 300]
    bank, shop_link = model.bytes["per_client"]
    assert model.transport.ledger.messages == [600, 2 * observed]  # an embedding up, a gradient down
    assert shop_link["up"] * 300 == bank["up"] * observed
    # the server's stand-in for the shop is the running mean of what the shop sent
    x = {k: v for k, v in rows[0][0].items() if k not in shop}
    before = model.inference.ledger.messages.copy()
    proba = model.predict_proba_one(x)
    assert model.inference.ledger.messages == [before[0] + 1, before[1]]  # the shop sends nothing
    pad = np.asarray(model.stand_in.fill(1, 1), dtype=np.float32)
    assert np.abs(pad).sum() > 0
    bank_emb = model.clients[0].model.forward(np.array([[x[f] for f in PARTITION["bank"]]], np.float32))[0]
    h = np.concatenate([bank_emb, pad], axis=1).astype(np.float32)
    logits = model.server.model.forward(h)[0][0].astype(np.float64)
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert [proba[0], proba[1]] == pytest.approx(expected.tolist(), abs=1e-6)


def test_a_partly_missing_client_reads_zeros_and_no_client_no_round():
    """Missing features of a client that observed the event are 0.0: the same model as fed zeros.
    An x that no client observed plays no round."""
    rows = _gauss_rows(120, seed=5)
    dropped = [({k: v for k, v in x.items() if k not in ("f1", "f5")}, y) for x, y in rows]
    zeroed = [(x | {"f1": 0.0, "f5": 0.0}, y) for x, y in rows]
    a, b = (OnlineVFL(partition=PARTITION, classes=[0, 1], seed=1) for _ in range(2))
    for (xa, y), (xb, _) in zip(dropped, zeroed):
        a.learn_one(xa, y)
        b.learn_one(xb, y)
    assert a.accumulated_error == b.accumulated_error and a.bytes == b.bytes
    assert a.predict_proba_one(rows[0][0]) == b.predict_proba_one(rows[0][0])
    a.learn_one({"other": 1.0}, 1)
    assert a.rounds == 120 and a.bytes == b.bytes


def test_against_rivers_own_classifiers_on_its_bundled_streams():
    """docs/estimators.md's comparison (fedstream.bench.river) on River's Phishing and Bananas:
    the same progressive validation for all three models; online VFL with two clients is within 1
    point of the better of River's LogisticRegression and HoeffdingTreeClassifier on Phishing and
    above both on Bananas, whose non-linear boundary the linear model cannot draw."""
    from fedstream.bench import river as bench

    rows = bench.run(streams=("Phishing", "Bananas"))
    table = {(r["stream"], r["model"]): r["accuracy"] for r in rows}
    assert {r["samples"] for r in rows if r["stream"] == "Phishing"} == {1250}
    best = {s: max(table[s, "LogisticRegression"], table[s, "HoeffdingTreeClassifier"])
            for s in ("Phishing", "Bananas")}
    assert table["Phishing", "OnlineVFL"] > best["Phishing"] - 0.01
    assert table["Bananas", "OnlineVFL"] > best["Bananas"] + 0.05
    assert "| Bananas | 5,300 |" in bench.markdown(rows)


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
