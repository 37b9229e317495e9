"""Deployed online VFL parties play their batches through compiled kernels (fedstream.ovfl.party_kernels).

The reference is the per-event path kept beside them (``simulator.path = "messages"``: each node
observes, embeds and learns event by event through its Client, the server plays
fedstream.ovfl.protocol.play_round round by round). For B = 1, 16 and 256, with every optimiser
(DLR, OGD, SLR) and client-side policy, both paths give the same models bit for bit, the same
errors and every message's size in the same order; with B = 1 both equal the simulator. A node
rebuilt from its saved state for every request (a SuperNode's ClientApp) plays the same. The
batch codec (pack, unpack) makes the codec's very bytes and refuses what the codec refuses.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.ovfl import party_kernels
from fedstream.ovfl.client import Client
from fedstream.ovfl.party_kernels import pack, unpack
from fedstream.ovfl.server import Server
from fedstream.transport.codec import decode, encode
from fedstream.transport.messages import Embedding, Gradient, Query
from tests.helpers.models import assert_same_models
from tests.helpers.ovfl_deploy import (
    assert_same_as_simulator,
    loopback_run,
    overrides,
    party_models,
    simulate,
)

CASES = {
    "dlr-random": {"optimizer.name": "dlr", "activation.name": "random"},
    "slr-event": {"optimizer.name": "slr", "optimizer.window": 3, "activation.name": "event",
                  "activation.threshold": 0.0, "vfl.clients": 3},
    "ogd-fixed-mean-padding": {"optimizer.name": "ogd", "activation.name": "fixed", "activation.k": 1,
                               "vfl.clients": 3, "network.padding": "mean"},
    # HIGGS (the real data, skipped without it): 4-layer client models, a 5-layer server model
    "dlr-full-higgs": {"optimizer.name": "dlr", "activation.name": "full", "data.name": "higgs"},
}


def config(root, case: str, batch: int, path: str, rounds: int = 600) -> dict:
    batching = {"network.batch": batch, "simulator.path": path}
    return load_config(None, overrides(root, rounds) | CASES[case] | batching)


def root_for(case: str, request):
    return request.getfixturevalue("data_root" if "higgs" in case else "mnist_root")


def _run(cfg: dict, persist: bool = False):
    net, reports = loopback_run(cfg, persist=persist)
    return net, party_models(net, reports)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("batch", [1, 16, 256])
def test_compiled_batches_equal_the_per_event_path(request, monkeypatch, case, batch):
    root = root_for(case, request)
    monkeypatch.setattr(party_kernels, "MIN_EVENTS", 1)  # B = 1 through the kernels too
    with monkeypatch.context() as patch:
        if "slr" not in case:  # (SLR's first l - 1 rounds take the per-event path)
            def refuse(*args, **kwargs):
                raise AssertionError("a party's per-event method was called on the compiled path")
            for cls, name in ((Client, "embed"), (Client, "answer"), (Client, "apply"), (Client, "skip"),
                              (Server, "on_embeddings")):
                patch.setattr(cls, name, refuse)
        fast, fast_models = _run(config(root, case, batch, "auto"))
    plain, plain_models = _run(config(root, case, batch, "messages"))
    assert fast.kernel is not None and plain.kernel is None
    assert_same_models(fast_models, plain_models)
    assert fast.summary()["accumulated_error"] == plain.summary()["accumulated_error"]
    assert fast.transport.sizes == plain.transport.sizes  # every message, in play_round's order
    assert fast.transport.ledger.state_dict().keys() == plain.transport.ledger.state_dict().keys()
    for key, value in fast.transport.ledger.state_dict().items():
        np.testing.assert_array_equal(value, plain.transport.ledger.state_dict()[key])
    assert fast.summary()["wire_part_bytes"] == plain.summary()["wire_part_bytes"]


@pytest.mark.parametrize("case", ["dlr-random", "slr-event"])
def test_compiled_batches_at_b1_equal_the_simulator(mnist_root, monkeypatch, case):
    monkeypatch.setattr(party_kernels, "MIN_EVENTS", 1)
    cfg = config(mnist_root, case, 1, "auto")
    engine, sizes, summary = simulate(load_config(None, dict(cfg, **{"simulator.path": "messages"})))
    net, models = _run(cfg)
    assert_same_as_simulator(engine, models)
    assert net.transport.sizes == sizes
    assert net.summary()["accumulated_error"] == summary["accumulated_error"]


def test_small_batches_take_the_per_event_path(mnist_root, monkeypatch):
    """Below MIN_EVENTS events a batch's set-up would cost more than the kernels save."""
    calls = []
    monkeypatch.setattr(party_kernels, "client_embed", lambda *a: calls.append(a))
    _run(config(mnist_root, "dlr-random", party_kernels.MIN_EVENTS - 1, "auto", rounds=50))
    assert calls == []


def test_a_node_rebuilt_for_every_request_plays_the_same(mnist_root):
    _, rebuilt = _run(config(mnist_root, "dlr-random", 16, "auto"), persist=True)
    _, kept = _run(config(mnist_root, "dlr-random", 16, "messages"))
    assert_same_models(rebuilt, kept)


def test_pack_makes_the_codecs_bytes_and_unpack_reads_them_back():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(5, 2, 3)).astype(np.float32)
    rounds = np.array([3, 4, 9, 10, 70000])
    for kind in (Embedding, Gradient):
        parts = pack(kind, rounds, 7, values)
        assert parts == [encode(kind(int(t), 7, v)) for t, v in zip(rounds, values)]
        np.testing.assert_array_equal(unpack(parts, kind, rounds, 7, (2, 3)), values)
        assert [decode(p).round for p in parts] == rounds.tolist()
    queries = pack(Query, rounds, 2, np.empty((5, 4, 0), np.float32))
    assert queries == [encode(Query(int(t), 2, 4)) for t in rounds]
    assert unpack(queries, Query, rounds, 2, (4, 0)).shape == (5, 4, 0)


def test_unpack_refuses_what_the_codec_refuses_or_another_message():
    values = np.ones((3, 1, 2), np.float32)
    rounds = np.arange(3)
    parts = pack(Embedding, rounds, 1, values)
    assert unpack(parts, Gradient, rounds, 1, (1, 2)) is None  # another kind
    assert unpack(parts, Embedding, rounds + 1, 1, (1, 2)) is None  # other rounds
    assert unpack(parts, Embedding, rounds, 0, (1, 2)) is None  # another client
    assert unpack(parts, Embedding, rounds, 1, (2, 1)) is None  # another shape
    assert unpack(parts[:2] + [parts[2][:-1]], Embedding, rounds, 1, (1, 2)) is None  # truncated
    moved = [parts[0] + parts[1][:1], parts[1][1:], parts[2]]  # the same bytes, split elsewhere
    assert unpack(moved, Embedding, rounds, 1, (1, 2)) is None
    assert unpack(parts, Embedding, rounds + (1 << 32), 1, (1, 2)) is None  # rounds past the header's u32
    assert unpack(parts, Embedding, rounds - 3, 1, (1, 2)) is None  # negative rounds
    assert unpack([], Embedding, rounds[:0], 1, (1, 2)).shape == (0, 1, 2)
    bad = values.copy()
    bad[1, 0, 1] = np.nan
    assert unpack(pack(Embedding, rounds, 1, bad), Embedding, rounds, 1, (1, 2)) is None  # not finite
