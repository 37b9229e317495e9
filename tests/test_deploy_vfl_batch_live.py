"""A batch VFL node kept in memory between requests (the gRPC runtime's Node) against one
rebuilt from its state per request (Flower's process per message): same replies, same model."""

from __future__ import annotations

import numpy as np

from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope
from fedstream.transport.codec import encode
from fedstream.transport.messages import Gradient
from fedstream.vfl.deploy.data import load_block
from fedstream.vfl.deploy.host import BatchVFLHost
from tests.helpers.vfl_deploy import vfl_tiny_config


def test_a_long_lived_node_keeps_the_graph_and_a_reloaded_one_recomputes(data_root, tmp_path):
    """The gRPC runtime keeps the host between requests: the due step's graph is still there and its
    forward pass is not run again; a host rebuilt from its state (Flower: a process per message)
    recomputes it, and both end with the same model, bit for bit."""
    config = vfl_tiny_config(data_root)
    block = load_block(config, 0, cache_dir=tmp_path)
    grad = lambda step: encode(Gradient(step, 0, np.full((50, 16), 0.01 * (step + 1), np.float32)))
    requests = [Envelope(ROUND, t, [grad(t - 1)] if t else [], {"split": "train",
                                                                "rows": list(range(50 * t, 50 * t + 50))})
                for t in range(4)] + [Envelope(FINISH, 4, [grad(3)], {})]
    live = BatchVFLHost(config, 0, rows=block)
    live.handle(Envelope(SETUP, 0))
    kept = None
    for env in requests:
        want = live.handle(env)
        host = BatchVFLHost(config, 0, rows=block, state=kept)  # a fresh process per request
        got = host.handle(env)
        kept = host.state_dict()
        assert got.parts == want.parts and got.info == want.info
    assert live.recomputed == 0 and host.recomputed == 1
