"""CHFL with your own models: ``model.server`` the common column FedAvg averages, ``model.client`` each
client's local head over its unique features (eq. 7's output sum at mu = 0)."""

import numpy as np
import pytest
import torch

from fedstream.chfl import CHFLClassifier
from fedstream.chfl.models import OwnColumn, OwnHead
from fedstream.config import load_config
from fedstream.errors import ConfigError
from tests.helpers.data import synthetic_table

CALLS = []


def head(*, input_size, n_classes, client):
    CALLS.append(("head", input_size, n_classes, client))
    return torch.nn.Sequential(torch.nn.Linear(input_size, 16), torch.nn.GELU(),
                               torch.nn.Linear(16, n_classes))


def column(*, input_size, n_classes):
    CALLS.append(("column", input_size, n_classes))
    return torch.nn.Sequential(torch.nn.Linear(input_size, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, n_classes))


def test_the_classifier_federates_own_columns_and_heads():
    X, y = synthetic_table(n=900, d=10, classes=3)
    CALLS.clear()
    clf = CHFLClassifier(clients=3, rounds=3, local_epochs=2, mus=(0.0,), client_model=head,
                         server_model=column, seed=1).fit(X[:700], y[:700])
    assert ("column", 3, 3) in CALLS and {c[3] for c in CALLS if c[0] == "head"} == {0, 1, 2}
    cohort_heads = clf.choices_
    assert len(cohort_heads) == 3
    assert clf.score(X[700:], y[700:]) > 0.45  # 3 classes: chance 1/3
    twice = CHFLClassifier(clients=3, rounds=3, local_epochs=2, mus=(0.0,), client_model=head,
                           server_model=column, seed=1).fit(X[:700], y[:700])
    np.testing.assert_array_equal(twice.predict_proba(X[700:]), clf.predict_proba(X[700:]))


def test_own_modules_take_the_places_of_the_columns():
    net = torch.nn.Linear(4, 3)
    x, logits = torch.zeros(2, 4), torch.ones(2, 3)
    assert OwnColumn(net).run(x)[0] == [] and torch.equal(OwnColumn(net)(x), net(x))
    assert torch.equal(OwnHead(net)(x, [], logits), logits + net(x))


def test_the_config_asks_for_mu_0_and_an_importable_path():
    base = {"task": "chfl", "model.client": "tests.helpers.own_models:top"}
    with pytest.raises(ConfigError, match="chfl.mus = 0,0.5,1: with model.client / model.server"):
        load_config(None, base)
    assert load_config(None, base | {"chfl.mus": "0"})["model.client"] == "tests.helpers.own_models:top"
    with pytest.raises(ConfigError, match="model.server = \"nope:f\": cannot import module 'nope'"):
        load_config(None, {"task": "chfl", "chfl.mus": "0", "model.server": "nope:f"})


def test_a_head_of_the_wrong_width_is_one_error():
    X, y = synthetic_table(n=300, d=10, classes=3)

    def wide(*, input_size, n_classes, **_):
        return torch.nn.Linear(input_size, n_classes + 2)
    with pytest.raises(ValueError, match=r"model.client = .*wide \(client 0\): on an input of shape "
                                         r"\(2, \d+\) the model returns shape \(2, 5\), expected \(2, 3\)"):
        CHFLClassifier(clients=2, rounds=1, local_epochs=1, mus=(0.0,), client_model=wide).fit(X, y)
