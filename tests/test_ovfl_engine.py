"""The online VFL simulator: equal to the plain reference, exact bytes, exact resume."""

import numpy as np
import pytest

from fedstream.ovfl.engine import OnlineVFL, feature_blocks
from fedstream.ovfl.parties import server_lr
from fedstream.ovfl.reference import ReferenceOnlineVFL
from fedstream.transport import encode
from fedstream.transport.codec import HEADER
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream
from tests.helpers.runs import untimed

ACTIVATIONS = {
    "full": {},
    "random": {"activation.p": 0.5},
    "event": {"activation.threshold": 0.0},
    "fixed": {"activation.k": 1},
}


def _assert_same_models(engine: OnlineVFL, ref: ReferenceOnlineVFL, tol: float) -> None:
    got = {"server": engine.server.model.parameters()} | {
        f"client{m}": c.model.parameters() for m, c in enumerate(engine.clients)
    }
    for party, params in ref.parameters().items():
        for p_fast, p_ref in zip(got[party], params):
            np.testing.assert_allclose(p_fast, p_ref, rtol=tol, atol=tol, err_msg=party)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("optimizer", ["ogd", "slr", "dlr"])
def test_fast_engine_equals_plain_reference(optimizer, activation):
    """Models after 200 rounds agree with per-sample autograd within float32 tolerance (1e-4)."""
    overrides = {"optimizer.name": optimizer, "activation.name": activation, "optimizer.window": 5,
                 "rounds": 200} | ACTIVATIONS[activation]
    cfg = small_config(**overrides)
    engine = OnlineVFL(cfg, stream=synthetic_stream())
    ref = ReferenceOnlineVFL(OnlineVFL(cfg, stream=synthetic_stream()))
    engine.run()
    ref.run(cfg["rounds"])
    _assert_same_models(engine, ref, tol=1e-4)
    agree = np.mean(np.array(ref.predictions) == engine_predictions(cfg))
    assert agree > 0.99


def engine_predictions(cfg):
    """Predictions of a fresh engine run, round by round."""
    preds = []
    OnlineVFL(cfg, stream=synthetic_stream()).run(on_round=lambda t, y, p: preds.append(p))
    return preds


def test_deep_tabular_models_equal_reference():
    """HIGGS/SUSY architecture (multi-layer clients and server) with DLR, 2 clients."""
    cfg = small_config(**{"data.name": "higgs", "vfl.clients": 2, "optimizer.name": "dlr", "rounds": 150,
                          "activation.name": "random", "optimizer.lr": 0.01})
    stream = lambda: synthetic_stream(classes=2, d=10)
    engine, ref = OnlineVFL(cfg, stream=stream()), ReferenceOnlineVFL(OnlineVFL(cfg, stream=stream()))
    engine.run()
    ref.run(cfg["rounds"])
    _assert_same_models(engine, ref, tol=1e-4)


class RecordingTransport:
    """Wraps a transport and records the size of every encoded message, independently."""

    def __init__(self, inner):
        self.inner, self.sizes, self.ledger = inner, [], inner.ledger

    def up(self, msg):
        self.sizes.append(len(encode(msg)))
        return self.inner.up(msg)

    def down(self, msg):
        self.sizes.append(len(encode(msg)))
        return self.inner.down(msg)


@pytest.mark.parametrize("optimizer", ["dlr", "slr"])
def test_bytes_equal_the_sum_of_encoded_messages(optimizer):
    cfg = small_config(**{"optimizer.name": optimizer, "activation.name": "random", "rounds": 120})
    engine = OnlineVFL(cfg, stream=synthetic_stream())
    engine.transport = recorder = RecordingTransport(engine.transport)
    s = engine.run()
    assert s["bytes"]["total"] == sum(recorder.sizes) > 0
    assert s["bytes"]["up"] + s["bytes"]["down"] == s["bytes"]["total"]
    assert sum(c["up"] + c["down"] for c in s["bytes"]["per_client"]) == s["bytes"]["total"]


@pytest.mark.parametrize("p", [0.25, 0.5, 0.75])
def test_random_activation_bytes_approach_one_plus_p_over_two(p):
    """Embeddings go up from all clients, gradients down to the active ones: (1+p)/2 of Full."""
    full = OnlineVFL(small_config(**{"model.embedding": 64, "rounds": 1000}), stream=synthetic_stream()).run()
    rand = OnlineVFL(small_config(**{"model.embedding": 64, "rounds": 1000, "activation.name": "random",
                                     "activation.p": p}), stream=synthetic_stream()).run()
    rate = np.mean(rand["activation_rate"])
    assert abs(rate - p) < 0.03
    # exact accounting: every message is a header plus 64 float32, queries are a header alone
    per_msg = HEADER.size + 4 * 64
    rounds, M = 1000, 4
    assert full["bytes"]["total"] == 2 * M * rounds * per_msg
    n_active = round(rate * M * rounds)
    expected = M * rounds * per_msg + n_active * per_msg + (M * rounds - n_active) * HEADER.size
    assert rand["bytes"]["total"] == expected
    assert rand["bytes"]["total"] / full["bytes"]["total"] == pytest.approx((1 + p) / 2, abs=0.025)


def test_passive_clients_do_not_learn_but_server_does():
    cfg = small_config(**{"activation.name": "fixed", "activation.k": 0, "rounds": 50})
    engine = OnlineVFL(cfg, stream=synthetic_stream())
    before = [p.copy() for c in engine.clients for p in c.model.parameters()]
    server_before = [p.copy() for p in engine.server.model.parameters()]
    s = engine.run()
    after = [p for c in engine.clients for p in c.model.parameters()]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert not all(np.array_equal(a, b) for a, b in zip(server_before, engine.server.model.parameters()))
    assert s["activation_rate"] == [0.0] * 4


def test_fixed_activation_picks_exactly_k_each_round():
    engine = OnlineVFL(
        small_config(**{"activation.name": "fixed", "activation.k": 3}), stream=synthetic_stream()
    )
    mask = engine.activation.mask(0, np.zeros((500, 4)))
    assert (mask.sum(axis=1) == 3).all()
    assert np.allclose(mask.mean(axis=0), 0.75, atol=0.07)


def test_learns_the_synthetic_stream():
    s = OnlineVFL(small_config(rounds=1500), stream=synthetic_stream()).run()
    assert s["interval_errors"][-1] < 0.2 < s["interval_errors"][0] + 0.5


@pytest.mark.parametrize("optimizer", ["dlr", "slr"])
def test_resume_equals_uninterrupted(tmp_path, optimizer):
    cfg = small_config(**{"optimizer.name": optimizer, "activation.name": "random", "rounds": 500,
                          "stream.drift": "class-prior"})
    full = OnlineVFL(cfg, stream=synthetic_stream(drift="class-prior")).run()
    first = OnlineVFL(cfg, stream=synthetic_stream(drift="class-prior"))
    first.run(230, checkpoint_path=tmp_path / "ck.npz", checkpoint_every=100)
    second = OnlineVFL(cfg, stream=synthetic_stream(drift="class-prior"))
    second.load(tmp_path / "ck.npz")
    assert second.t == 230
    resumed = second.run()
    assert untimed(resumed) == untimed(full)


def test_feature_blocks_are_contiguous_and_cover_everything():
    blocks = feature_blocks(784, 4)
    assert [(b.start, b.stop) for b in blocks] == [(0, 196), (196, 392), (392, 588), (588, 784)]
    assert sum(b.stop - b.start for b in feature_blocks(18, 4)) == 18
    from fedstream.errors import ConfigError

    with pytest.raises(ConfigError, match="vfl.clients"):
        feature_blocks(3, 4)


def test_client_rejects_a_feature_block_that_does_not_fit_its_model():
    from fedstream.errors import ProtocolError

    engine = OnlineVFL(small_config(), stream=synthetic_stream())
    with pytest.raises(
        ProtocolError, match=r"client 0: feature block has shape \(5,\), its model expects \(4,\)"
    ):
        engine.clients[0].observe(0, np.zeros(5, np.float32))


def test_server_rejects_embeddings_of_the_wrong_shape():
    from fedstream.errors import ProtocolError
    from fedstream.transport.messages import Embedding

    engine = OnlineVFL(small_config(), stream=synthetic_stream())
    bad = [Embedding(0, m, np.zeros((1, 8 if m else 7), np.float32)) for m in range(4)]
    with pytest.raises(
        ProtocolError, match="embedding from client 0 .* shape \\(1, 7\\), expected \\(1, 8\\)"
    ):
        engine.server.on_embeddings(0, 1, bad, [0, 1, 2, 3])


def test_resume_refuses_a_checkpoint_beyond_rounds(tmp_path):
    from fedstream.errors import ConfigError

    cfg = small_config(rounds=200)
    OnlineVFL(cfg, stream=synthetic_stream()).run(checkpoint_path=tmp_path / "ck.npz")
    shorter = OnlineVFL(small_config(rounds=100), stream=synthetic_stream())
    with pytest.raises(ConfigError, match="at round 200, beyond rounds = 100"):
        shorter.load(tmp_path / "ck.npz")


def test_server_lr_defaults_to_lr_and_can_differ():
    assert server_lr(small_config()) == 0.05
    assert server_lr(small_config(**{"optimizer.server_lr": 0.2})) == 0.2


def test_nan_model_is_reported_as_divergence_not_a_protocol_bug():
    from fedstream.errors import DivergedError

    cfg = small_config(rounds=50)
    engine = OnlineVFL(cfg, stream=synthetic_stream())
    engine.run(10)
    engine.clients[1].model.layers[0].W[:] = np.inf  # what a far too large learning rate leads to
    with pytest.raises(DivergedError, match="round 10: the model of client 1") as exc:
        engine.run()
    assert exc.value.round == 10


OPTIONS = {"compression.up": "topk-grad", "compression.cache": True, "compression.feedback": True,
           "compression.value_dtype": "int8", "compression.outliers": "clip", "optimizer.name": "slr",
           "compression.rounding": "stochastic", "compression.width": 5.0}


@pytest.mark.parametrize("extra", [{}, OPTIONS, OPTIONS | {"compression.value_dtype": "float16"}],
                         ids=["topk", "options", "options-float16"])
def test_compressed_online_run_sends_fewer_bytes_and_resumes_exactly(tmp_path, extra):
    """The compression codecs in the online engine: counted bytes drop, and the codec state
    (previous sigma, last gradients, caches, residuals) is checkpointed so a resumed run continues
    identically (options: SLR re-sends each sample in its window, so the residuals are read)."""
    codecs = {"compression.up": "topk", "compression.down": "quant-huffman", "compression.ratio": 0.25}
    codecs |= extra
    plain = OnlineVFL(small_config(rounds=300, **{k: v for k, v in extra.items() if "optimizer" in k}),
                      stream=synthetic_stream()).run()
    cfg = small_config(rounds=300, **codecs)
    whole = OnlineVFL(cfg, stream=synthetic_stream()).run()
    assert (
        whole["bytes"]["up"] < 0.6 * plain["bytes"]["up"] and whole["bytes"]["down"] < plain["bytes"]["down"]
    )
    first = OnlineVFL(cfg, stream=synthetic_stream())
    first.run(150)
    first.save(tmp_path / "ck.npz")
    second = OnlineVFL(cfg, stream=synthetic_stream())
    second.load(tmp_path / "ck.npz")
    resumed = second.run()
    for key in ("accumulated_error", "interval_errors", "bytes"):
        assert resumed[key] == whole[key], key


def test_a_diverged_run_counts_the_activations_of_the_rounds_it_played():
    from fedstream.errors import DivergedError

    cfg = small_config(rounds=50, **{"activation.name": "full"})
    engine = OnlineVFL(cfg, stream=synthetic_stream())
    engine.run(10)

    def poison(t, y, prediction):  # after round 14 a client's model blows up: round 15 diverges
        if t == 14:
            engine.clients[1].model.layers[0].W[:] = np.inf

    with pytest.raises(DivergedError) as exc:
        engine.run(on_round=poison)
    assert exc.value.round == 15
    assert engine.active_counts.tolist() == [15, 15, 15, 15]
