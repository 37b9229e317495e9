"""The fused path of the simulator equals the message path: models, errors, bytes, resume."""

import time

import numpy as np
import pytest

import fedstream.ovfl.fused
import fedstream.ovfl.fused_kernels
from fedstream.errors import DivergedError
from fedstream.ovfl.engine import OnlineVFL
from fedstream.ovfl.fused import array_list
from fedstream.ovfl.protocol import ComputeClock
from fedstream.transport import encode
from fedstream.transport.codec import encoded_size
from fedstream.transport.messages import Embedding, Gradient, Query
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream
from tests.helpers.runs import untimed

ACTIVATIONS = {
    "full": {},
    "random": {"activation.p": 0.5},
    "event": {"activation.threshold": 0.0},
    "fixed": {"activation.k": 1},
}
MESSAGES = {"simulator.path": "messages"}


def _params(run: OnlineVFL) -> list[np.ndarray]:
    return [np.array(p) for party in (run.server, *run.clients) for p in party.model.parameters()]


def _states(run: OnlineVFL) -> dict:
    """Everything a checkpoint holds of the parties (models, optimiser windows, rings)."""
    return {"server": run.server.state_dict()} | {f"c{m}": c.state_dict() for m, c in enumerate(run.clients)}


def _assert_equal_runs(a: OnlineVFL, b: OnlineVFL, sa: dict, sb: dict) -> None:
    for p, q in zip(_params(a), _params(b)):
        np.testing.assert_array_equal(p, q)  # bit for bit
    sa_, sb_ = _states(a), _states(b)
    for party in sa_:
        for key in sa_[party]:
            np.testing.assert_array_equal(sa_[party][key], sb_[party][key], err_msg=f"{party} {key}")
    assert untimed(sa, "config") == untimed(sb, "config")  # errors, intervals, bytes, activation rates


def _pair(cfg: dict, stream=synthetic_stream, **hooks):
    fused = OnlineVFL(dict(cfg), stream=stream())
    plain = OnlineVFL(dict(cfg) | MESSAGES, stream=stream())
    assert fused.fused is not None and plain.fused is None
    return fused, plain, fused.run(**hooks), plain.run(**hooks)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("optimizer", ["ogd", "slr", "dlr"])
def test_fused_equals_message_path(optimizer, activation):
    """Every optimiser x activation, a stationary stream: same parameters, optimiser state,
    interval errors, byte ledger (up, down, messages per client) and activation counts."""
    cfg = small_config(**{"optimizer.name": optimizer, "activation.name": activation, "optimizer.window": 5,
                          "rounds": 260, "eval.interval": 50} | ACTIVATIONS[activation])
    _assert_equal_runs(*_pair(cfg))


@pytest.mark.parametrize("optimizer", ["ogd", "slr", "dlr"])
def test_fused_equals_message_path_deep_models_drifting_stream(optimizer):
    """HIGGS/SUSY's multi-layer parties on a drifting stream; DLR's windows long enough that some
    layers take the running sum and some the deferred update."""
    cfg = small_config(**{"data.name": "higgs", "vfl.clients": 2, "optimizer.name": optimizer, "rounds": 200,
                          "activation.name": "random", "optimizer.lr": 0.01, "optimizer.window": 3,
                          "stream.drift": "class-prior"})
    _assert_equal_runs(*_pair(cfg, lambda: synthetic_stream(classes=2, d=10, drift="class-prior")))


@pytest.mark.parametrize("optimizer, activation", [("slr", "random"), ("dlr", "event"), ("ogd", "fixed")])
def test_fused_equals_message_path_across_a_chunk_boundary(optimizer, activation):
    """4,429 rounds: the stream's second 4,096-round chunk (fresh rows, fresh activation draws), with
    an evaluation interval (97) that does not divide the chunk, so one interval straddles the boundary."""
    cfg = small_config(**{"optimizer.name": optimizer, "activation.name": activation, "optimizer.window": 5,
                          "rounds": 4429, "eval.interval": 97} | ACTIVATIONS[activation])
    _assert_equal_runs(*_pair(cfg))


def test_fused_dlr_deferred_and_running_sum_layers():
    """l = 1 and a long window: every layer deferred, then none (DEFER_COST's two ways)."""
    for window in (1, 40):
        cfg = small_config(**{"optimizer.name": "dlr", "optimizer.window": window, "rounds": 150,
                              "activation.name": "random"})
        _assert_equal_runs(*_pair(cfg))


def test_predictions_and_hooks_equal():
    """Round by round predictions (on_round) and the progress reports' rounds are the same."""
    cfg = small_config(**{"rounds": 230})
    seen = {"fused": [], "messages": []}
    for name, over in (("fused", {}), ("messages", MESSAGES)):
        run = OnlineVFL(dict(cfg) | over, stream=synthetic_stream())
        run.run(on_round=lambda t, y, p, n=name: seen[n].append((t, y, p)),
                on_progress=lambda r, n=name: seen[n].append(("progress", r.t, r.metrics.errors)),
                progress_every=37)
    assert seen["fused"] == seen["messages"]
    assert len(seen["fused"]) == 230 + 230 // 37


def test_encoded_size_is_the_codec_length():
    """The fused path's byte rule is the encoder's: len(encode(msg)) for every kind and shape."""
    for rows, cols in ((1, 8), (5, 64), (3, 1)):
        v = np.zeros((rows, cols), np.float32)
        assert encoded_size(Embedding, rows, cols) == len(encode(Embedding(7, 1, v)))
        assert encoded_size(Gradient, rows, cols) == len(encode(Gradient(7, 1, v)))
        assert encoded_size(Query, rows, 0) == len(encode(Query(7, 1, rows)))


@pytest.mark.parametrize("optimizer", ["slr", "dlr"])
def test_resume_across_paths(tmp_path, optimizer):
    """A checkpoint written by one path resumes on the other and ends where an uninterrupted
    run ends (models, optimiser windows, errors, bytes)."""
    cfg = small_config(**{"optimizer.name": optimizer, "optimizer.window": 4, "rounds": 240,
                          "activation.name": "random"})
    whole, _, s_whole, _ = _pair(cfg)
    for first, second, stop in ((MESSAGES, {}, 3), ({}, MESSAGES, 130), ({}, {}, 99)):
        ck = tmp_path / f"{stop}.npz"
        OnlineVFL(dict(cfg) | first, stream=synthetic_stream()).run(stop, checkpoint_path=ck)
        resumed = OnlineVFL(dict(cfg) | second, stream=synthetic_stream())
        resumed.load(ck)
        s = resumed.run()
        _assert_equal_runs(whole, resumed, s_whole, s)


def test_checkpoints_mid_run_equal(tmp_path):
    """Periodic checkpoints cut the fused segments; the result does not change."""
    cfg = small_config(**{"rounds": 200})
    a, b, sa, sb = _pair(cfg, checkpoint_path=tmp_path / "c.npz", checkpoint_every=45)
    _assert_equal_runs(a, b, sa, sb)


def test_divergence_is_reported_at_the_same_round():
    """A client model blown up after round 14 (by an on_round hook): round 15 diverges on both
    paths, with the activations of the rounds played counted."""
    cfg = small_config(**{"rounds": 50, "activation.name": "random"})
    seen = []
    for over in ({}, MESSAGES):
        run = OnlineVFL(dict(cfg) | over, stream=synthetic_stream())

        def poison(t, y, prediction, run=run):
            if t == 14:
                run.clients[1].model.layers[0].W[:] = np.inf

        with pytest.raises(DivergedError) as info:
            run.run(on_round=poison)
        seen.append((info.value.round, run.active_counts.tolist(), run.metrics.rounds))
    assert seen[0] == seen[1] and seen[0][0] == 15


def test_fused_path_applies_only_in_process_uncompressed():
    """Compressed links and topl (the server's stand-in learns each round) take the message path."""
    assert OnlineVFL(small_config(), stream=synthetic_stream()).fused is not None
    assert OnlineVFL(small_config(**{"compression.up": "topk"}), stream=synthetic_stream()).fused is None
    assert OnlineVFL(small_config(**{"activation.name": "topl", "activation.window": 20}),
                     stream=synthetic_stream()).fused is None


def test_fused_compute_clock():
    """The client and server time of the fused loop: never negative, within the run's wall time,
    and the CPU estimate at most the wall time it was measured in. Positive where the CPU has a
    cycle counter (``llvm.readcyclecounter`` reads 0 on targets without one)."""
    run = OnlineVFL(small_config(**{"rounds": 2000}), stream=synthetic_stream())
    s = run.run()
    assert 0 <= s["client_compute_seconds"] and 0 <= s["server_compute_seconds"]
    assert s["client_compute_seconds"] + s["server_compute_seconds"] <= s["wall_seconds"]
    assert 0 <= s["client_cpu_seconds"] <= s["client_compute_seconds"]
    assert 0 <= s["server_cpu_seconds"] <= s["server_compute_seconds"]
    if fedstream.ovfl.fused_kernels.cycle_count() != fedstream.ovfl.fused_kernels.cycle_count():
        assert 0 < s["client_compute_seconds"] and 0 < s["server_compute_seconds"]


class _FastThreadClock:
    """``time`` with a thread clock that runs 3x the wall clock: what two clocks read one after
    the other can show over a short segment (1.0003x on an idle machine)."""

    perf_counter = staticmethod(time.perf_counter)

    @staticmethod
    def thread_time():
        return 3 * time.perf_counter()


def test_fused_cpu_estimate_never_exceeds_the_wall_time(monkeypatch):
    """However the two clocks disagree, the CPU seconds stay within the wall seconds."""
    monkeypatch.setattr(fedstream.ovfl.fused, "time", _FastThreadClock)
    s = OnlineVFL(small_config(**{"rounds": 500}), stream=synthetic_stream()).run()
    assert s["client_cpu_seconds"] <= s["client_compute_seconds"]
    assert s["server_cpu_seconds"] <= s["server_compute_seconds"]


def test_compute_clock_caps_the_cpu_ratio():
    clock = ComputeClock()
    clock.add_segment(0.7, 0.3, 1.0003)
    clock.add_segment(0.1, 0.2, 0.5)
    client, server = clock.cpu()
    assert client <= clock.client and server <= clock.server
    clock = ComputeClock()
    clock.samples = [1.0, 1.2, 1.0, 0.5]  # sampled sections whose CPU reads ran past their wall reads
    clock.client, clock.server = 2.0, 2.0
    assert clock.cpu() == (2.0, 1.0)


@pytest.mark.parametrize("optimizer", ["ogd", "dlr"])
def test_kernel_only_floor_computes_the_same_models(optimizer):
    """The bench's floor does the fused path's arithmetic: with every client activated it ends
    with the very same parameters."""
    cfg = small_config(**{"optimizer.name": optimizer, "activation.name": "full", "rounds": 120})
    fused = OnlineVFL(dict(cfg), stream=synthetic_stream())
    fused.run()
    floor = OnlineVFL(dict(cfg), stream=synthetic_stream())
    X, y, _ = floor.stream.batch(0, 120)
    floor.fused.floor(X, np.ascontiguousarray(y, np.int64), 0, 120)
    for p, q in zip(_params(fused), _params(floor)):
        np.testing.assert_array_equal(p, q)


def _readonly(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("arrays, compiled", [
    ([np.zeros((2, 3), np.float32), np.ones((4, 3), np.float32)], True),  # one numba type: the cached builder
    ([np.zeros((3, 2), np.float32).T, np.ones((2, 3), np.float32).T], False),  # not C-ordered: from Python
    ([_readonly(np.zeros((2, 3), np.float32))], False),  # read-only: from Python
], ids=["c-ordered", "transposed", "read-only"])
def test_the_fused_path_lists_the_parties_arrays_themselves(arrays, compiled, monkeypatch):
    """The compiled loop updates the parties' weights in place through these lists: no copies."""
    built = []
    monkeypatch.setattr(fedstream.ovfl.fused, "typed_list",
                        lambda t: built.append(len(t)) or fedstream.ovfl.fused_kernels.typed_list(t))
    listed = array_list(iter(arrays))
    assert built == ([len(arrays)] if compiled else [])
    assert len(listed) == len(arrays)
    for got, array in zip(listed, arrays):
        assert np.shares_memory(got, array) and got.shape == array.shape
    if arrays[0].flags.writeable:
        listed[0][...] = 7.0
        assert (arrays[0] == 7.0).all()


def test_fused_path_takes_over_once_ready(monkeypatch):
    """SLR's first l - 1 rounds take the message path (its rings are not full); from then on the
    fused path plays the segments, not the message path to the end of the first segment."""
    import fedstream.ovfl.engine as engine

    calls, play_round = [], engine.play_round
    monkeypatch.setattr(engine, "play_round", lambda t, *a, **k: calls.append(t) or play_round(t, *a, **k))
    window = 6
    cfg = small_config(**{"optimizer.name": "slr", "optimizer.window": window, "rounds": 600,
                          "eval.interval": 300})
    run = OnlineVFL(cfg, stream=synthetic_stream())
    assert run.fused is not None
    run.run()
    assert calls == list(range(window - 1))
