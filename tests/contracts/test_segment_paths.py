"""Contract checks over every :class:`fedstream.seams.SegmentPath`: the simulator's fused path and a
deployed server's compiled batches. Each satisfies the Protocol, and a run whose segments it plays
ends with the models, predictions (prequential errors) and byte counts of the same run played
round by round through ``play_round`` (``simulator.path = "messages"``), bit for bit.
"""

from __future__ import annotations

import numpy as np

from fedstream.config import load_config
from fedstream.ovfl.deploy.driver import KernelPath
from fedstream.ovfl.engine import OnlineVFL
from fedstream.seams import SegmentPath
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream
from tests.helpers.models import assert_same_models
from tests.helpers.ovfl_deploy import loopback_run, overrides, party_models


def _simulated(path: str) -> OnlineVFL:
    run = OnlineVFL(small_config(**{"rounds": 500, "simulator.path": path}), stream=synthetic_stream())
    run.run()
    return run


def _deployed(root, path: str):
    config = load_config(None, overrides(root, 300) | {"network.batch": 32, "simulator.path": path})
    net, reports = loopback_run(config, persist=False)
    return net, party_models(net, reports)


def _assert_same_counts(a, b) -> None:
    for key, value in a.state_dict().items():
        np.testing.assert_array_equal(value, b.state_dict()[key])


def test_the_fused_path_is_a_segment_path_that_plays_as_play_round():
    fused, plain = _simulated("auto"), _simulated("messages")
    assert isinstance(fused.fused, SegmentPath) and plain.fused is None
    assert_same_models({"server": fused.server.model.parameters()},
                       {"server": plain.server.model.parameters()})
    for a, b in zip(fused.clients, plain.clients):
        assert_same_models({"client": a.model.parameters()}, {"client": b.model.parameters()})
    assert fused.metrics.intervals == plain.metrics.intervals
    _assert_same_counts(fused.transport.ledger, plain.transport.ledger)


def test_a_deployed_servers_batches_are_a_segment_path_that_plays_as_play_round(mnist_root, monkeypatch):
    played, play = [], KernelPath.play
    monkeypatch.setattr(KernelPath, "play", lambda self, *a: played.append(a[3:]) or play(self, *a))
    fast, fast_models = _deployed(mnist_root, "auto")
    plain, plain_models = _deployed(mnist_root, "messages")
    assert isinstance(KernelPath(fast), SegmentPath) and plain.kernel is None
    # all but rounds 96..99: a segment ends at the evaluation interval, and 4 rounds go round by round
    assert sum(j1 - j0 for j0, j1 in played) == 296
    assert_same_models(fast_models, plain_models)
    assert fast.metrics.intervals == plain.metrics.intervals
    _assert_same_counts(fast.transport.ledger, plain.transport.ledger)
