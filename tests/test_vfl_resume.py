"""Batch VFL checkpoints: an interrupted run resumed from its last epoch ends as an uninterrupted one."""

import csv
import json

import pytest

from fedstream.cli import main
from fedstream.errors import ConfigError
from fedstream.selection.methods import VFPSSelector
from fedstream.transport import CompressionSpec
from fedstream.vfl import BatchVFLSettings, checkpoint, run_batch_vfl
from fedstream.vfl.selection import SelectionSpec
from tests.helpers.runs import untimed

SMALL = {"train_rows": 1000, "test_rows": 300, "hidden": 32, "embedding": 16, "batch_size": 50, "lr": 0.05}
COMBINATION = CompressionSpec(up="topk-grad", cache=True, down="quant-huffman")  # every kind of link state
OPTIONS = CompressionSpec(up="topk-grad", cache=True, down="quant-huffman", outliers="clip",
                          value_dtype="float16", feedback=True, ratio=0.25,
                          rounding="stochastic", width=5.0)  # + per-sample residuals


class Interrupt(Exception):
    pass


def interrupt_at(epoch: int, step: int):
    def progress(event):
        if event["event"] == "step" and event["epoch"] == epoch and event["step"] >= step:
            raise Interrupt
    return progress


def untimed_rows(rows):
    return [untimed(r) for r in rows]


def metrics(folder):
    with open(folder / "metrics.csv") as fh:
        return untimed_rows(list(csv.DictReader(fh)))


@pytest.mark.parametrize("spec", [COMBINATION, OPTIONS], ids=["paper", "options"])
def test_interrupted_then_resumed_run_equals_an_uninterrupted_one(data_root, tmp_path, spec):
    settings = BatchVFLSettings(epochs=3, compression=spec, **SMALL)
    whole = run_batch_vfl(settings, data_root, seed=1, out=tmp_path / "whole")
    with pytest.raises(Interrupt):  # dies in the middle of epoch 3: the checkpoint is epoch 2's
        run_batch_vfl(settings, data_root, seed=1, out=tmp_path / "cut", progress=interrupt_at(3, 10))
    assert len(metrics(tmp_path / "cut")) == 2 and not (tmp_path / "cut" / "summary.json").exists()
    resumed = run_batch_vfl(settings, data_root, seed=1, out=tmp_path / "cut", resume=True)
    assert untimed_rows(resumed["per_epoch"]) == untimed_rows(whole["per_epoch"])
    assert resumed["bytes"] == whole["bytes"] and resumed["final_accuracy"] == whole["final_accuracy"]
    assert metrics(tmp_path / "cut") == metrics(tmp_path / "whole")
    saved = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert saved["eval_bytes_up"] == whole["eval_bytes_up"] and saved["epochs"] == 3
    # the first test loss depends on the test cache being restored too (evaluation after resume)
    assert resumed["per_epoch"][2]["test_loss"] == whole["per_epoch"][2]["test_loss"]


def test_resume_may_raise_epochs_but_not_change_other_settings(data_root, tmp_path):
    spec = CompressionSpec(up="topk", down="sign-scaled")
    two = run_batch_vfl(BatchVFLSettings(epochs=2, compression=spec, **SMALL), data_root, seed=0)
    run_batch_vfl(BatchVFLSettings(epochs=1, compression=spec, **SMALL), data_root, seed=0, out=tmp_path)
    more = run_batch_vfl(
        BatchVFLSettings(epochs=2, compression=spec, **SMALL), data_root, seed=0, out=tmp_path, resume=True
    )
    assert untimed_rows(more["per_epoch"]) == untimed_rows(two["per_epoch"])
    with pytest.raises(ConfigError, match="compression.down"):
        run_batch_vfl(BatchVFLSettings(epochs=3, compression=CompressionSpec(up="topk"), **SMALL), data_root,
                      seed=0, out=tmp_path, resume=True)
    with pytest.raises(ConfigError, match="may not be lower"):
        run_batch_vfl(BatchVFLSettings(epochs=1, compression=spec, **SMALL), data_root, seed=0, out=tmp_path,
                      resume=True)
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="not a readable batch VFL checkpoint"):
        run_batch_vfl(BatchVFLSettings(epochs=2, compression=spec, **SMALL), data_root, seed=0, out=tmp_path,
                      resume=True)
    with pytest.raises(ConfigError, match="needs out"):
        run_batch_vfl(BatchVFLSettings(epochs=2, **SMALL), data_root, seed=0, resume=True)


def test_cli_resume_for_task_vfl(data_root, tmp_path):
    sets = [
        f"--set={k}={v}"
        for k, v in {
            "data.train_rows": 600,
            "data.test_rows": 200,
            "model.hidden": 16,
            "model.embedding": 8,
            "train.batch_size": 50,
            "compression.up": "topk-grad",
            "compression.cache": "true",
        }.items()
    ]
    out = tmp_path / "run"
    base = ["run", "vfl-mnist", "--quiet", f"--set=data.root={data_root}", *sets, "--out", str(out)]
    assert main([*base, "--set=train.epochs=1"]) == 0
    assert (out / "checkpoint.pt").exists()
    assert main([*base, "--set=train.epochs=2"]) == 2  # the folder holds a run: --resume is needed
    assert main([*base, "--set=train.epochs=2", "--resume"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs"] == 2 and [r["epoch"] for r in summary["per_epoch"]] == [1, 2]
    assert main(["run", "vfl-mnist", "--quiet", "--resume", "--out", str(tmp_path / "empty")]) == 2


def test_a_checkpoint_written_before_a_key_existed_resumes_when_the_key_is_at_its_default(tmp_path):
    """Keys added to fedstream since (compression.width, compression.rounding) held their defaults
    in an older run; set to anything else, the change is refused and named."""
    from fedstream.vfl.checkpoint import _check_config

    new = BatchVFLSettings(epochs=2, **SMALL).to_config()
    old = {k: v for k, v in new.items() if k not in ("compression.width", "compression.rounding")}
    _check_config(tmp_path / "checkpoint.pt", old, new)  # no error
    with pytest.raises(ConfigError, match=r"compression.width: 3.0 -> 6.0"):
        _check_config(tmp_path / "checkpoint.pt", old, new | {"compression.width": 6.0})


RELAXED = SelectionSpec(method="vfps", l=2, k=3, dynamic="relaxed", keep=0.5, arrival=0.3, lifespan_min=1,
                        lifespan_max=3)


def untimed_events(summary):
    return [{k: v for k, v in e.items() if k != "seconds"} for e in summary["selection"]["events"]]


@pytest.mark.parametrize("stored", [True, False], ids=["selection-stored", "checkpoint-without-selection"])
def test_resume_restores_the_selection_instead_of_selecting_again(data_root, tmp_path, monkeypatch, stored):
    """A relaxed VF-PS run re-selects as rows come and go. The checkpoint holds the selection's
    state, so a resume computes only the selections of the epochs still to play; a checkpoint
    written before that state was stored replays the plans of the epochs done. Both end as the
    uninterrupted run."""
    settings = BatchVFLSettings(epochs=5, selection=RELAXED, **SMALL)
    whole = run_batch_vfl(settings, data_root, seed=1, out=tmp_path / "whole")
    events = untimed_events(whole)
    assert len(events) >= 3  # the start and re-selections on both sides of the interruption
    with pytest.raises(Interrupt):
        run_batch_vfl(settings, data_root, seed=1, out=tmp_path / "cut", progress=interrupt_at(4, 2))
    path = tmp_path / "cut" / checkpoint.NAME
    if not stored:  # as written before the selection's state was stored
        payload = checkpoint.read(path, config=settings.to_config() | {"seed": 1})
        del payload["selection"], payload["selection_arrays"]
        checkpoint.write(path, payload)
    computed = []
    select = VFPSSelector.select
    monkeypatch.setattr(VFPSSelector, "select",
                        lambda self, *a, **k: computed.append(1) or select(self, *a, **k))
    resumed = run_batch_vfl(settings, data_root, seed=1, out=tmp_path / "cut", resume=True)
    rows = [[untimed(r, "selection_seconds") for r in run["per_epoch"]] for run in (resumed, whole)]
    assert rows[0] == rows[1]
    assert untimed_events(resumed) == events and resumed["bytes"] == whole["bytes"]
    assert len(computed) == sum(e["epoch"] >= (4 if stored else 1) for e in events)


def test_a_damaged_selection_state_is_refused_naming_the_file(data_root, tmp_path):
    settings = BatchVFLSettings(epochs=2, selection=RELAXED, **SMALL)
    with pytest.raises(Interrupt):
        run_batch_vfl(settings, data_root, seed=1, out=tmp_path, progress=interrupt_at(2, 2))
    path = tmp_path / checkpoint.NAME
    payload = checkpoint.read(path, config=settings.to_config() | {"seed": 1})
    for state, why in [({"last_epoch": 1}, "KeyError"),  # the rest of the state is missing
                       ({"last_epoch": 2}, "saved at epoch 2, the checkpoint at epoch 1"),
                       (["not", "a", "state"], "AttributeError")]:
        payload["selection"] = json.dumps(state)
        checkpoint.write(path, payload)
        with pytest.raises(ConfigError, match=f"checkpoint.pt: the selection state is damaged.*{why}"):
            run_batch_vfl(settings, data_root, seed=1, out=tmp_path, resume=True)
