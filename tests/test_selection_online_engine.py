"""Top-l activation in the online engine: unselected clients are never queried, so the bytes are
exactly those of the activated clients' embeddings and gradients; the engine equals the plain
PyTorch reference with padding; a resumed run equals an uninterrupted one."""

from __future__ import annotations

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.errors import ConfigError, ProtocolError
from fedstream.ovfl.client import Client
from fedstream.transport.codec import HEADER
from tests.helpers.configs import small_config
from tests.helpers.data import synthetic_stream

E = 8  # small_config's model.embedding


def _recording_run(monkeypatch, **overrides):
    """An engine (CHUNK = 50) whose chunk masks are recorded, and its summary."""
    from fedstream.ovfl import engine

    monkeypatch.setattr(engine, "CHUNK", 50)
    run = engine.OnlineVFL(small_config(**overrides), stream=synthetic_stream())
    masks, original = [], run.chunk_inputs

    def recording(chunk, X):
        blocks, mask = original(chunk, X)
        masks.append(mask)
        return blocks, mask

    run.chunk_inputs = recording
    return run, masks, run.run()


def _no_query(self, query):
    raise AssertionError(f"client {self.index} was queried in round {query.round}")


def test_topl_sends_only_for_activated_clients_and_bytes_drop(monkeypatch):
    topl = {"activation.name": "topl", "activation.l": 2, "activation.window": 40, "activation.explore": 3,
            "rounds": 200}
    with monkeypatch.context() as m:  # a query would be a message to an unselected client: there must be none
        m.setattr(Client, "on_query", _no_query)
        run, masks, summary = _recording_run(m, **topl)
        run.run(220)
    mask = np.concatenate(masks)[:200]
    message = HEADER.size + 4 * E  # one float32 embedding or gradient row (DLR: one row per round)
    per_client = mask.sum(axis=0)
    assert summary["bytes"]["per_client"] == [
        {"up": int(n) * message, "down": int(n) * message} for n in per_client
    ]
    assert summary["bytes"]["total"] == 2 * int(mask.sum()) * message
    assert summary["bytes"]["messages"] == 2 * int(
        mask.sum()
    )  # an embedding up and a gradient down, nothing else
    t = np.arange(200)
    assert mask[t % 3 == 0].all() and (mask[t % 3 != 0].sum(axis=1) == 2).all()
    assert (
        run.activation.estimate.updates >= 2
        and summary["selection_updates"] == run.activation.estimate.updates
    )
    assert all(
        len(set(map(tuple, m[(50 * c + np.arange(50)) % 3 != 0]))) == 1 for c, m in enumerate(masks) if c >= 3
    )
    assert summary["activation_rate"] == pytest.approx((per_client / 200).tolist())

    _, _, full = _recording_run(monkeypatch, rounds=200)
    _, _, fixed = _recording_run(
        monkeypatch, **{"activation.name": "fixed", "activation.k": 2, "rounds": 200}
    )
    assert full["bytes"]["total"] == 200 * 4 * 2 * message
    assert (
        fixed["bytes"]["total"] == full["bytes"]["total"] - 200 * 2 * 4 * E
    )  # passive clients: a query, no gradient
    explored = len(range(0, 200, 3))  # 67 exploration rounds: all 4 clients; the other 133: the top 2
    assert (
        summary["bytes"]["total"]
        == 2 * (explored * 4 + (200 - explored) * 2) * message
        < 0.7 * full["bytes"]["total"]
    )


@pytest.mark.parametrize(
    "optimizer, padding", [("ogd", "mean"), ("slr", "latest"), ("dlr", "ema"), ("dlr", "zero")]
)
def test_topl_engine_equals_plain_reference(monkeypatch, optimizer, padding):
    from fedstream.ovfl import engine, reference

    monkeypatch.setattr(
        engine, "CHUNK", 64
    )  # several chunks: the buffer is full at round 79, scored at 128 and 192
    monkeypatch.setattr(reference, "CHUNK", 64)
    cfg = small_config(**{"optimizer.name": optimizer, "activation.name": "topl", "activation.l": 2,
                          "activation.window": 40, "activation.explore": 2, "activation.padding": padding,
                          "optimizer.window": 5, "rounds": 200})
    fast = engine.OnlineVFL(cfg, stream=synthetic_stream())
    ref = reference.ReferenceOnlineVFL(engine.OnlineVFL(cfg, stream=synthetic_stream()))
    fast.run()
    ref.run(cfg["rounds"])
    assert fast.activation.estimate.updates == ref.engine.activation.estimate.updates == 2
    np.testing.assert_array_equal(fast.activation.estimate.scores, ref.engine.activation.estimate.scores)
    got = {"server": fast.server.model.parameters()} | {
        f"client{m}": c.model.parameters() for m, c in enumerate(fast.clients)
    }
    for party, params in ref.parameters().items():
        for p_fast, p_ref in zip(got[party], params):
            np.testing.assert_allclose(p_fast, p_ref, rtol=1e-4, atol=1e-4, err_msg=party)


def test_topl_resume_equals_uninterrupted(monkeypatch, tmp_path):
    from fedstream.ovfl import engine

    monkeypatch.setattr(engine, "CHUNK", 64)
    cfg = small_config(**{"activation.name": "topl", "activation.l": 2, "activation.window": 40,
                          "activation.explore": 2, "activation.padding": "ema", "rounds": 300})
    full = engine.OnlineVFL(cfg, stream=synthetic_stream()).run()
    first = engine.OnlineVFL(cfg, stream=synthetic_stream())
    first.run(
        150, checkpoint_path=tmp_path / "ck.npz", checkpoint_every=100
    )  # mid-chunk: buffer and padding saved
    second = engine.OnlineVFL(cfg, stream=synthetic_stream())
    second.load(tmp_path / "ck.npz")
    resumed = second.run()
    for key in ("accumulated_error", "interval_errors", "bytes", "activation_rate", "selection_updates"):
        assert resumed[key] == full[key], key
    assert full["selection_updates"] == 3


def test_a_client_neither_activated_nor_queried_needs_a_stand_in(monkeypatch):
    from fedstream.ovfl import engine

    run = engine.OnlineVFL(small_config(rounds=10), stream=synthetic_stream())
    X, y, _ = run.stream.batch(0, 1)
    blocks = [X[0, b] for b in run.blocks]
    with pytest.raises(ProtocolError, match="client 1 was neither activated nor queried"):
        engine.play_round(0, blocks, int(y[0]), np.array([True, False, True, True]), run.server, run.clients,
                          run.transport, run.clock, queried=np.zeros(4, bool))


def test_topl_activation_keys():
    with pytest.raises(ConfigError, match="activation.l = 5 exceeds vfl.clients = 4"):
        small_config(**{"activation.name": "topl", "activation.l": 5})
    with pytest.raises(ConfigError, match="activation.l = 0 is out of range"):
        small_config(**{"activation.name": "topl", "activation.l": 0})
    with pytest.raises(ConfigError, match="activation.explore = 0 is out of range"):
        small_config(**{"activation.name": "topl", "activation.explore": 0})
    with pytest.raises(ConfigError, match="activation.padding = 'median' is out of range"):
        small_config(**{"activation.name": "topl", "activation.padding": "median"})
    small_config(**{"activation.name": "full", "activation.l": 4})  # read by topl only
    with pytest.raises(ConfigError, match="activation.l is not a setting of task = 'vfl'"):
        load_config("vfl-mnist", {"activation.l": 2})


def test_topl_experiment_runs_on_imnist_and_saves_bytes(data_root, tmp_path):
    import json

    from fedstream.experiments.definition import load_experiment
    from fedstream.experiments.report import write_report
    from fedstream.experiments.runner import run_experiment

    exp = load_experiment("selection-online-topl")
    assert exp.grid == {"activation.name": ["full", "random", "event", "topl"]}
    sets = [f"data.root={data_root}", "rounds=8192", "eval.interval=2048", "activation.window=200"]
    index = run_experiment(exp, scale="small", out=tmp_path, sets=sets, workers=1, tune_rounds=500)
    summaries = {
        run["grid"]["activation.name"]: json.loads((tmp_path / run["folder"] / "summary.json").read_text())
        for run in index["runs"]
    }
    total = {name: s["bytes"]["total"] for name, s in summaries.items()}
    assert total["topl"] < total["random"] < total["full"]
    assert (
        summaries["topl"]["selection_updates"] >= 1
    )  # 200 exploration rounds by round 2000: scored at 4096, 8192
    rates = summaries["topl"]["activation_rate"]
    assert sum(rates) == pytest.approx(2 + 2 * len(range(0, 8192, 10)) / 8192)
    text = write_report(tmp_path).read_text()
    assert "Online VFL Table 1 (DLR rows) and top-l" in text


def test_topl_resumes_exactly_from_a_checkpoint_at_the_end_of_a_chunk(tmp_path):
    """A checkpoint written at a multiple of the 4096-round chunk must hold the policy's estimate
    after that chunk was shown to it (it used to be saved just before)."""
    from fedstream.ovfl.engine import CHUNK, Hooks, OnlineVFL

    cfg = small_config(**{"activation.name": "topl", "activation.l": 2, "activation.window": 50,
                          "optimizer.name": "ogd", "rounds": 8500, "eval.interval": 500})
    whole = OnlineVFL(cfg, stream=synthetic_stream())
    whole.run()
    first = OnlineVFL(cfg, stream=synthetic_stream())
    X, y, _ = first.stream.batch(0, CHUNK)
    path = tmp_path / "at-chunk-end.npz"
    first.play_chunk(0, X, y, cfg["rounds"], Hooks(checkpoint_path=path, checkpoint_every=CHUNK))
    resumed = OnlineVFL(cfg, stream=synthetic_stream())
    resumed.load(path)
    assert resumed.t == CHUNK
    resumed.run()
    assert resumed.metrics.intervals == whole.metrics.intervals
    assert (resumed.active_counts == whole.active_counts).all()
    assert resumed.transport.ledger.summary() == whole.transport.ledger.summary()
