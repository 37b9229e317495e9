"""K runs stacked in batched kernels compute what each run computes alone: models, predictions,
optimiser state, bytes; and a stacked run's checkpoint resumes as a plain run."""

import numpy as np
import pytest

from fedstream.errors import ProtocolError
from fedstream.ovfl.engine import CHUNK, Hooks, OnlineVFL
from fedstream.ovfl.stack import RunStack, StackDiverged, stack_key
from fedstream.transport import encode
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.messages import Embedding, Gradient, Query
from fedstream.transport.stacked import StackTransport, decode_frames, encode_frames
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream

# one grid as a paper table has it: activations and learning rates differ inside a stack
GRID = [
    {"activation.name": "full", "optimizer.lr": 0.05},
    {"activation.name": "random", "activation.p": 0.5, "optimizer.lr": 0.02},
    {"activation.name": "event", "activation.threshold": 0.0, "optimizer.lr": 0.05},
    {"activation.name": "fixed", "activation.k": 1, "optimizer.lr": 0.1},
]


def _runs(optimizer: str, rounds: int, **extra) -> list[OnlineVFL]:
    stream = synthetic_stream()
    return [
        OnlineVFL(
            small_config(
                **{"optimizer.name": optimizer, "optimizer.window": 5, "rounds": rounds} | g | extra
            ),
            stream=stream,
        )
        for g in GRID
    ]


def _play_stacked(runs: list[OnlineVFL], rounds: int, hooks=None) -> RunStack:
    stack = RunStack(runs)
    stack.run(rounds, hooks)
    return stack


def _state(run: OnlineVFL) -> dict[str, np.ndarray]:
    parts = {"server": run.server} | {f"client{m}": c for m, c in enumerate(run.clients)}
    return {f"{p}.{k}": v for p, party in parts.items() for k, v in party.state_dict().items()}


@pytest.mark.parametrize("optimizer", ["ogd", "slr", "dlr"])
def test_stacked_runs_equal_the_runs_alone(optimizer):
    """After 300 rounds (crossing eval intervals) every run of a stack has the models, optimiser
    windows, per-interval errors and per-client byte counts it has when played alone. Float32
    arithmetic is the same kernels on the same slices: we require agreement to 1e-6."""
    alone = _runs(optimizer, 300)
    for r in alone:
        r.run()
    stacked = _runs(optimizer, 300)
    _play_stacked(stacked, 300)
    for a, s in zip(alone, stacked):
        assert s.t == a.t == 300
        assert s.metrics.intervals == a.metrics.intervals and s.metrics.errors == a.metrics.errors
        assert s.transport.ledger.summary() == a.transport.ledger.summary()
        assert (s.active_counts == a.active_counts).all()
        sa, ss = _state(a), _state(s)
        assert sa.keys() == ss.keys()
        for key in sa:
            np.testing.assert_allclose(ss[key], sa[key], rtol=1e-6, atol=1e-6, err_msg=key)


def test_deep_models_stack_too():
    """HIGGS/SUSY shapes (4-layer clients, 5-layer server), DLR: the same as alone."""
    extra = {"data.name": "higgs", "vfl.clients": 2, "optimizer.lr": 0.01}
    mk = lambda: [
        OnlineVFL(
            small_config(**{"optimizer.name": "dlr", "rounds": 150} | g | extra | {"optimizer.lr": 0.01}),
            stream=synthetic_stream(classes=2, d=10),
        )
        for g in GRID[:2]
    ]
    alone, stacked = mk(), mk()
    for r in alone:
        r.run()
    _play_stacked(stacked, 150)
    for a, s in zip(alone, stacked):
        for p_a, p_s in zip(a.server.model.parameters(), s.server.model.parameters()):
            np.testing.assert_allclose(p_s, p_a, rtol=1e-6, atol=1e-6)


def test_a_stacked_checkpoint_resumes_as_a_plain_run(tmp_path):
    """Checkpoints written by a stack at round 200 are plain run checkpoints: a run resumed from one
    alone ends where the uninterrupted run ends."""
    stacked = _runs("dlr", 300)
    paths = [tmp_path / f"r{k}.npz" for k in range(len(stacked))]
    _play_stacked(stacked, 200, [Hooks(checkpoint_path=p, checkpoint_every=200) for p in paths])
    for k, path in enumerate(paths):
        uninterrupted = _runs("dlr", 300)[k]
        uninterrupted.run()
        resumed = _runs("dlr", 300)[k]
        resumed.load(path)
        assert resumed.t == 200
        resumed.run()
        assert resumed.metrics.intervals == uninterrupted.metrics.intervals
        assert resumed.transport.ledger.summary() == uninterrupted.transport.ledger.summary()
        for key, value in _state(uninterrupted).items():
            np.testing.assert_allclose(_state(resumed)[key], value, rtol=1e-6, atol=1e-6, err_msg=key)


def test_stack_keys_separate_what_cannot_share_kernels():
    ogd, dlr = _runs("ogd", 10)[0], _runs("dlr", 10)[0]
    assert stack_key(ogd) != stack_key(dlr)
    assert stack_key(_runs("dlr", 10, **{"optimizer.alpha": 0.9})[0]) != stack_key(dlr)
    assert stack_key(_runs("dlr", 10, **{"compression.down": "sign"})[0]) is None
    with pytest.raises(ProtocolError, match="cannot share a stack"):
        RunStack([ogd, dlr])


def test_frames_are_the_single_run_encodings():
    """Frame j of a stacked message is byte for byte encode() of run runs[j]'s own message."""
    values = np.random.default_rng(0).normal(size=(3, 2, 5)).astype(np.float32)
    runs = np.array([0, 2, 5])
    for msg, single in [(Embedding(7, 1, values, runs), lambda j: Embedding(7, 1, values[j])),
                        (Gradient(7, 1, values, runs), lambda j: Gradient(7, 1, values[j])),
                        (Query(7, 1, 2, runs), lambda j: Query(7, 1, 2))]:
        frames = encode_frames(msg)
        for j in range(3):
            assert frames[j].tobytes() == encode(single(j))
        back, bad = decode_frames(frames, runs)
        assert type(back) is type(msg) and not bad.any() and (back.runs == runs).all()
        if not isinstance(msg, Query):
            assert np.array_equal(back.values, values)


def test_stack_transport_counts_each_run_and_flags_non_finite_frames():
    ledgers = [ByteLedger(2) for _ in range(3)]
    tr = StackTransport(ledgers)
    values = np.ones((2, 1, 4), np.float32)
    values[1, 0, 2] = np.nan
    tr.up(Embedding(0, 1, values, np.array([0, 2])))
    tr.write_back()
    assert [l.up for l in ledgers] == [[0, 27], [0, 0], [0, 27]]
    assert tr.diverged == {2}


def test_corrupt_frames_are_rejected():
    frames = encode_frames(Embedding(3, 0, np.zeros((2, 1, 4), np.float32), np.array([0, 1])))
    bad_header = frames.copy()
    bad_header[1, 1] = 9  # run 1's frame says round 9
    with pytest.raises(ProtocolError, match="different headers"):
        decode_frames(bad_header, np.array([0, 1]))
    with pytest.raises(ProtocolError, match="frames hold"):
        decode_frames(frames[:, :-4], np.array([0, 1]))


def test_a_diverging_run_leaves_the_stack_and_the_others_go_on():
    """A run whose client model turns inf (what a far too large lr leads to) stops the stack at
    that round with its index; the other runs' state is written back, and a new stack of them
    continues to the end exactly as they run alone."""
    stacked = _runs("dlr", 300)[:2]
    stack = RunStack(stacked)
    X, y, _ = stacked[0].stream.batch(0, CHUNK)
    stack.play_chunk(0, X, y, 10, [Hooks(), Hooks()])
    stack.clients[1].model.layers[0].W[1] = np.inf
    with pytest.raises(StackDiverged) as info:
        stack.play_chunk(0, X, y, 300, [Hooks(), Hooks()])
    assert info.value.runs == [1] and info.value.round == 10
    message = str(
        stack.diverged_error(1, 10)
    )  # the stack finishes the round: the server has learned from inf too
    assert "diverged at round 10" in message and "client 1 holds NaN or inf" in message
    assert stacked[1].t == 10 and stacked[0].t == 11
    _play_stacked(stacked[:1], 300)
    alone = _runs("dlr", 300)[0]
    alone.run()
    assert stacked[0].metrics.intervals == alone.metrics.intervals
    assert stacked[0].transport.ledger.summary() == alone.transport.ledger.summary()
