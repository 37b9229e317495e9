"""Participant selection wired into the trainers: the selection.* keys, the batch server's padding,
who sends what, re-selection when the dynamic schedule changes the data, the selection experiments
end to end (top-l activation in the online engine: test_selection_online_engine.py)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from fedstream.config import load_config
from fedstream.errors import ConfigError, ProtocolError
from fedstream.selection.padding import LatestPadding, ZeroPadding
from fedstream.transport import InProcessTransport
from fedstream.transport.messages import Embedding
from fedstream.vfl import (
    BatchClient,
    BatchServer,
    BatchVFLSettings,
    run_batch_vfl,
)
from fedstream.vfl.protocol import train_step
from fedstream.vfl.selection import Participation, SelectionSpec
from tests.helpers.configs import small_config

SMALL = dict(train_rows=1200, test_rows=300, hidden=16, embedding=8, batch_size=100, lr=0.1, split="columns")


# --- configuration -------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, key", [
    ({"selection.method": "vfps", "selection.l": 5}, "selection.l = 5 exceeds vfl.clients = 4"),
    ({"selection.method": "random", "selection.l": 0}, "selection.l = 0 is out of range"),
    ({"selection.method": "fixed"}, "selection.method = 'fixed' needs selection.clients"),
    ({"selection.method": "fixed", "selection.clients": "1,4"}, "selection.clients = '1,4' names client 4"),
    ({"selection.method": "fixed", "selection.clients": "1,1"}, "selection.clients = '1,1'"),
    ({"selection.clients": "0,2"}, "selection.clients = '0,2' is read only with selection.method = 'fixed'"),
    ({"selection.padding": "median"}, "selection.padding = 'median' is out of range"),
    ({"selection.dynamic": "relaxed", "selection.lifespan_min": 9, "selection.lifespan_max": 3},
     "selection.lifespan_min = 9 exceeds selection.lifespan_max = 3"),
    ({"selection.keep": 0.0}, "selection.keep = 0.0 is out of range"),
])
def test_bad_selection_keys_name_the_key(overrides, key):
    with pytest.raises(ConfigError, match=key.replace("(", r"\(").replace(")", r"\)")):
        load_config("vfl-mnist", overrides)


def test_selection_keys_belong_to_batch_vfl_and_round_trip():
    with pytest.raises(ConfigError, match="selection.method is not a setting of task = 'ovfl'"):
        load_config(None, {"selection.method": "vfps"})
    cfg = load_config("vfl-mnist", {"selection.method": "fixed", "selection.clients": "2, 0",
                                    "selection.dynamic": "discrete", "vfl.split": "columns"})
    settings = BatchVFLSettings.from_config(cfg)
    assert settings.selection.clients == (0, 2) and settings.split == "columns"
    assert BatchVFLSettings.from_config(settings.to_config()) == settings
    assert settings.to_config()["selection.clients"] == "0,2"
    with pytest.raises(ConfigError, match="selection.l = 3 exceeds vfl.clients = 2"):
        BatchVFLSettings(clients=2, selection=SelectionSpec(method="vfps"))


def test_k_at_least_a_class_size_names_selection_k(data_root):
    spec = SelectionSpec(method="vfps", l=2, k=50)  # 300 rows: some digit has fewer than 51
    with pytest.raises(
        ConfigError, match=r"selection.k = 50 must be smaller than every class's size.*selection.k <="
    ):
        run_batch_vfl(
            BatchVFLSettings(epochs=1, selection=spec, **SMALL | {"train_rows": 300}), data_root, seed=0
        )


def test_topl_activation_keys():
    with pytest.raises(ConfigError, match="activation.l = 5 exceeds vfl.clients = 4"):
        small_config(**{"activation.name": "topl", "activation.l": 5})
    with pytest.raises(ConfigError, match="activation.l = 0 is out of range"):
        small_config(**{"activation.name": "topl", "activation.l": 0})
    small_config(**{"activation.name": "full", "activation.l": 4})  # read by topl only
    with pytest.raises(ConfigError, match="activation.l is not a setting of task = 'vfl'"):
        load_config("vfl-mnist", {"activation.l": 2})


# --- the server's padding and who sends ------------------------------------------------------------

class Recorder(torch.nn.Module):
    """A top model that remembers its input."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.lin, self.seen = torch.nn.Linear(n_in, n_out), None

    def forward(self, x):
        self.seen = x.detach().clone()
        return self.lin(x)


def _emb(step, m, value, rows=3, e=2):
    return Embedding(step, m, np.full((rows, e), value, np.float32))


def test_server_pads_missing_clients_and_returns_gradients_to_senders_only():
    model = Recorder(6, 3)
    server = BatchServer(model, n_clients=3, embedding=2, lr=0.1, padding=LatestPadding(3, 2))
    labels = torch.zeros(3, dtype=torch.long)
    _, grads = server.train_step(0, [_emb(0, 0, 1.0), _emb(0, 1, 2.0), _emb(0, 2, 3.0)], labels)
    assert [g.client for g in grads] == [0, 1, 2]
    _, grads = server.train_step(1, [_emb(1, 0, 5.0), None, _emb(1, 2, 7.0)], labels)
    assert [g.client for g in grads] == [0, 2]  # nothing goes back to the client that did not send
    np.testing.assert_array_equal(
        model.seen.numpy(), np.tile([5, 5, 2, 2, 7, 7], (3, 1))
    )  # latest of client 1
    server.logits(2, [None, _emb(2, 1, 9.0), None], 3)  # evaluation pads but does not update the padding
    np.testing.assert_array_equal(model.seen.numpy(), np.tile([5, 5, 9, 9, 7, 7], (3, 1)))
    np.testing.assert_array_equal(server.padding.fill(1, 1), [[2.0, 2.0]])
    zero = BatchServer(Recorder(6, 3), n_clients=3, embedding=2, lr=0.1, padding=ZeroPadding(3, 2))
    zero.train_step(0, [None, _emb(0, 1, 2.0), None], labels)
    np.testing.assert_array_equal(zero.model.seen.numpy()[:, [0, 1, 4, 5]], 0.0)
    with pytest.raises(ProtocolError, match=r"no embedding from client\(s\) \[1\] and no padding"):
        BatchServer(Recorder(6, 3), n_clients=3, embedding=2, lr=0.1).train_step(
            0, [_emb(0, 0, 1), None, _emb(0, 2, 1)], labels
        )
    with pytest.raises(ProtocolError, match="no client sent"):
        server.train_step(3, [None, None, None], labels)


def test_unselected_clients_send_nothing_and_do_not_learn():
    torch.manual_seed(0)
    clients = [BatchClient(m, torch.nn.Linear(4, 2), lr=0.1) for m in range(3)]
    server = BatchServer(torch.nn.Linear(6, 3), 3, 2, lr=0.1, padding=ZeroPadding(3, 2))
    before = clients[1].model.weight.detach().clone()
    link = InProcessTransport(3)
    inputs = [torch.randn(5, 4) for _ in range(3)]
    train_step(0, inputs, torch.zeros(5, dtype=torch.long), clients, server, link, selected=(0, 2))
    per_client = link.ledger.summary()["per_client"]
    assert per_client[1] == {"up": 0, "down": 0} and per_client[0]["up"] > 0 and per_client[2]["down"] > 0
    assert torch.equal(before, clients[1].model.weight)


# --- re-selection when the data change -------------------------------------------------------------

def _blocks(n=400, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    informative = [0.0, 2.0, 0.5, 1.0]
    return [rng.normal(size=(n, 3)) + w * y[:, None] for w in informative], y


def test_discrete_schedule_reselects_exactly_when_the_subset_is_redrawn():
    blocks, y = _blocks()
    for prob in (0.0, 1.0, 0.3):
        part = Participation(
            SelectionSpec(method="vfps", l=2, dynamic="discrete", update_prob=prob, aggregate="mean"),
            blocks,
            y,
            seed=1,
        )
        plans = [part.plan(e) for e in range(1, 11)]
        redrawn = [e for e in range(2, 11) if part.schedule.changed(e - 1)]
        assert [p.epoch for p in plans if p.event] == [1] + redrawn
        assert [e["reason"] for e in part.events] == ["start"] + ["data redrawn"] * len(redrawn)
        chosen = None
        for p in plans:  # each epoch trains on that epoch's subset, with the clients of the last selection
            np.testing.assert_array_equal(p.rows, np.flatnonzero(part.schedule.mask(p.epoch - 1)))
            chosen = tuple(p.event["clients"]) if p.event else chosen
            assert p.clients == chosen and len(chosen) == 2
            if p.event:
                assert p.event["available_rows"] == p.rows.size
        if prob == 1.0:
            assert len(part.events) == 10
    assert all(e["distance_bytes"] > 0 and len(e["scores"]) == 4 for e in part.events)


def test_relaxed_random_redraws_when_data_change_and_every_adds_rounds():
    blocks, y = _blocks()
    part = Participation(
        SelectionSpec(method="random", l=2, dynamic="relaxed", arrival=0.2), blocks, y, seed=0
    )
    plans = [part.plan(e) for e in range(1, 6)]
    assert all(p.event is not None for p in plans)  # samples arrive and leave every epoch here
    assert plans[1].rows.size != plans[0].rows.size
    static = Participation(SelectionSpec(method="random", l=2, every=2), blocks, y, seed=0)
    assert [e for e in range(1, 8) if static.plan(e).event] == [1, 3, 5, 7]
    fixed = Participation(SelectionSpec(method="fixed", clients="0,3", dynamic="discrete", update_prob=1.0),
                          blocks, y, seed=0)
    assert [fixed.plan(e).clients for e in (1, 2, 3)] == [(0, 3)] * 3 and len(fixed.events) == 1
    with pytest.raises(ConfigError, match="expected epoch 4"):
        fixed.plan(5)


def test_relaxed_vfps_reselects_when_the_pessimistic_bound_is_crossed():
    blocks, y = _blocks(600)
    for aggregate in ("sum", "mean", "marginal"):
        part = Participation(
            SelectionSpec(
                method="vfps",
                l=2,
                dynamic="relaxed",
                arrival=0.3,
                aggregate=aggregate,
                lifespan_min=1,
                lifespan_max=3,
            ),
            blocks,
            y,
            seed=0,
        )
        plans = [part.plan(e) for e in range(1, 5)]
        assert plans[0].event["reason"] == "start"
        assert {e["reason"] for e in part.events[1:]} <= {"pessimistic bound crossed"}
        assert len(part.events) >= 2  # a third of the data turns over per epoch: the bounds cannot hold
        if aggregate == "marginal":  # its wider score range: [lo - hi/2, hi - lo/2]
            assert part.pessimistic.lo < 0 < part.pessimistic.hi


def test_batch_run_with_selection_records_and_sends_only_selected(data_root, tmp_path):
    spec = SelectionSpec(method="vfps", l=2, dynamic="discrete", update_prob=1.0, keep=0.5, aggregate="mean")
    summary = run_batch_vfl(
        BatchVFLSettings(epochs=2, selection=spec, **SMALL), data_root, seed=0, out=tmp_path
    )
    events = summary["selection"]["events"]
    assert [e["epoch"] for e in events] == [1, 2] and summary["selection"]["reselections"] == 1
    assert all(len(e["clients"]) == 2 and e["seconds"] > 0 and e["available_rows"] < 1200 for e in events)
    assert summary["selection_distance_bytes"] == sum(e["distance_bytes"] for e in events) > 0
    with open(tmp_path / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["reselected"] for r in rows] == ["1", "1"]
    for row, event in zip(rows, events):
        assert [j for j in range(4) if row[f"selected_{j}"] == "1"] == event["clients"]
        assert float(row["score_0"]) == pytest.approx(event["scores"][0])
        assert int(row["available_rows"]) == event["available_rows"]
    # a client never selected sent nothing; the bytes are those of the selected clients only
    never = set(range(4)) - {c for e in events for c in e["clients"]}
    for c in never:
        assert summary["bytes"]["per_client"][c] == {"up": 0, "down": 0}
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["selection"]["method"] == "vfps" and saved["best_test_loss"] > 0
    assert 0 < summary["best_train_accuracy"] <= 1


def test_default_run_is_unchanged_by_the_selection_machinery(data_root):
    base = run_batch_vfl(BatchVFLSettings(epochs=1, **SMALL), data_root, seed=0)
    every = run_batch_vfl(
        BatchVFLSettings(epochs=1, selection=SelectionSpec(method="fixed", clients="0,1,2,3"), **SMALL),
        data_root,
        seed=0,
    )
    assert "selection" not in base
    assert every["per_epoch"][0]["train_loss"] == base["per_epoch"][0]["train_loss"]
    assert every["bytes"] == base["bytes"]


# --- the experiments ---------------------------------------------------------------------------------

SELECTION = [
    "selection-table1",
    "selection-table1-bruteforce",
    "selection-table2",
    "selection-table2-bruteforce",
]
FAST = ["data.train_rows=1000", "data.test_rows=300", "train.epochs=2"]


@pytest.mark.parametrize("name", SELECTION)
def test_selection_definitions_load_with_paper_rows_as_fractions(name):
    from fedstream.experiments.definition import load_experiment
    from fedstream.experiments.runner import grid_points

    exp = load_experiment(name)
    assert "dynamic_vfps_participant_selection.txt" in exp.source and exp.notes.strip() and exp.figures
    points = grid_points(exp)
    for scale in ("small", "paper"):
        for point in points:
            cfg = load_config(exp.base, exp.overrides(scale) | point)
            assert (cfg["vfl.split"], cfg["model.hidden"], cfg["model.embedding"], cfg["model.server_hidden"],
                    cfg["optimizer.lr"]) == ("columns", 16, 32, 64, 0.1)
            assert cfg["train.epochs"] == (300 if scale == "paper" else 8)
            assert (cfg["data.train_rows"] is None) == (scale == "paper")
    for table in exp.paper:
        for run, values in table.rows:
            assert run in points
            assert all(v is None or 0 < v < 2 for v in values)
            if "best_accuracy" in table.columns and values[table.columns.index("best_accuracy")] is not None:
                assert values[table.columns.index("best_accuracy")] < 1


def test_numbers_repeated_across_selection_tables_agree():
    from fedstream.experiments.definition import load_experiment

    def rows(name):
        return {
            tuple(str(v) for v in run.values()): values for run, values in load_experiment(name).paper[0].rows
        }

    t1, b1, t2 = rows("selection-table1"), rows("selection-table1-bruteforce"), rows("selection-table2")
    assert (
        t2[("discrete", "3", "random")] == t1[("random", "latest")]
    )  # Table 2's 3 random = Table 1's latest
    assert b1[("0,1,2,3",)] == [0.535, 0.614, 0.586, 0.541]


@pytest.mark.parametrize("name", SELECTION)
def test_selection_experiment_runs_end_to_end_and_reports(name, data_root, tmp_path):
    from fedstream.experiments.definition import load_experiment
    from fedstream.experiments.report import write_report
    from fedstream.experiments.runner import run_experiment

    exp = load_experiment(name)
    index = run_experiment(
        exp, scale="small", out=tmp_path, sets=[f"data.root={data_root}"] + FAST, workers=1
    )
    text = write_report(tmp_path).read_text()
    for run in index["runs"]:
        summary = json.loads((tmp_path / run["folder"] / "summary.json").read_text())
        assert 0 < summary["best_accuracy"] <= 1 and summary["selection"]["events"]
    table = text.split(f"### {exp.paper[0].table}")[1].split("\n## ")[0]
    first = next(
        line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| run")
    )
    assert first.split(" | ")[1] != "–"
    assert len(list((tmp_path / "figures").glob("*.png"))) == len(exp.figures)


def test_relaxed_marginal_vfps_resumes_exactly():
    blocks, y = _blocks(600)
    spec = SelectionSpec(method="vfps", l=2, dynamic="relaxed", arrival=0.3, aggregate="marginal",
                         lifespan_min=1, lifespan_max=3)
    whole = Participation(spec, blocks, y, seed=0)
    want = [whole.plan(e).clients for e in range(1, 7)]
    first = Participation(spec, blocks, y, seed=0)
    got = [first.plan(e).clients for e in range(1, 4)]
    second = Participation(spec, blocks, y, seed=0)
    second.load_state_dict(*first.state_dict())
    got += [second.plan(e).clients for e in range(4, 7)]
    untimed = [[{k: v for k, v in e.items() if k != "seconds"} for e in p.events] for p in (second, whole)]
    assert got == want and untimed[0] == untimed[1]
