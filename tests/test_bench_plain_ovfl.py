"""The bench's plain PyTorch reference computes the engine's function (to float32 tolerance)."""

import numpy as np
import pytest

from fedstream.bench.plain_ovfl import PlainOnlineVFL
from fedstream.ovfl.engine import OnlineVFL
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream


@pytest.mark.parametrize("optimizer", ["ogd", "dlr"])
def test_plain_reference_equals_engine(optimizer):
    cfg = small_config(**{"optimizer.name": optimizer, "activation.name": "full", "optimizer.window": 7,
                          "rounds": 200})
    engine = OnlineVFL(dict(cfg), stream=synthetic_stream())
    plain = PlainOnlineVFL(OnlineVFL(dict(cfg), stream=synthetic_stream()))
    preds = []
    engine.run(on_round=lambda t, y, p: preds.append(p))
    plain.advance(200)
    got = {"server": engine.server.model.parameters()} | {
        f"client{m}": c.model.parameters() for m, c in enumerate(engine.clients)}
    for party, params in plain.parameters().items():
        for p_engine, p_plain in zip(got[party], params):
            np.testing.assert_allclose(p_engine, p_plain, rtol=1e-4, atol=1e-4, err_msg=party)
    assert np.mean(np.array(preds) == np.array(plain.predictions)) > 0.99
