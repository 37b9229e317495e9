"""CHFL checkpoints: a run interrupted anywhere and resumed equals the uninterrupted run (models,
choices, accuracies, bytes, metrics rows); a checkpoint of another run or a corrupt file is refused;
``fedstream run --resume`` and the experiment runner resume CHFL runs."""

import csv
import json
from pathlib import Path

import pytest

from fedstream.chfl import stream as stream_mod
from fedstream.chfl.checkpoint import CHECKPOINT, CheckpointError
from fedstream.chfl.client import Client
from fedstream.chfl.stream import StreamSettings, run_stream_on_table
from fedstream.chfl.trainer import run_on_table
from fedstream.runs.torch_checkpoint import load_torch
from tests.helpers.configs import tiny_settings
from tests.helpers.data import require, synthetic_table
from tests.helpers.runs import untimed


class Crash(Exception):
    """Stands for a kill: raised from inside training."""


def _rows(folder: Path) -> list[dict]:
    with open(folder / "metrics.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _crash_after(monkeypatch, cls, name: str, calls: int) -> None:
    """Make ``cls.name`` raise Crash on its ``calls + 1``-th call (the first ``calls`` run)."""
    original = getattr(cls, name)
    count = {"n": 0}

    def wrapped(self, *args, **kwargs):
        count["n"] += 1
        if count["n"] > calls:
            raise Crash
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, wrapped)


SETTINGS = {"lrs": (1e-2, 3e-3), "rounds": 3}  # 2 federations x 3 rounds x 2 clients: 12 train_epochs calls


@pytest.mark.parametrize("method", ["chfl", "fedprox", "local"])
@pytest.mark.parametrize(
    "calls", [3, 6, 9, 12]
)  # federation 1 round 2, federation 2 rounds 1 and 2, at the end
def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, monkeypatch, method, calls):
    X, y = synthetic_table(n=600)
    s = (
        tiny_settings(**SETTINGS, shared_baselines=("common", "concat"))
        if method == "chfl"
        else tiny_settings(**SETTINGS)
    )
    whole = run_on_table(X, y, s, method=method, seed=3, run_dir=tmp_path / "whole")
    assert not whole["resumed"]
    with monkeypatch.context() as m:
        _crash_after(m, Client, "train_epochs", calls)
        if calls == 12:  # all training done: crash while scoring the choices on the test rows
            _crash_after(m, Client, "restore", 0)
        with pytest.raises(Crash):
            run_on_table(X, y, s, method=method, seed=3, run_dir=tmp_path / "part")
    assert (tmp_path / "part" / CHECKPOINT).exists()
    resumed = run_on_table(X, y, s, method=method, seed=3, run_dir=tmp_path / "part")
    assert resumed["resumed"]
    assert untimed(resumed, "resumed") == untimed(whole, "resumed")
    assert _rows(tmp_path / "part") == _rows(tmp_path / "whole")
    assert len(_rows(tmp_path / "whole")) == len(s.lrs) * s.rounds  # one row per evaluated round


def test_rows_after_the_checkpoint_are_written_once(tmp_path, monkeypatch):
    """A crash after a round's row but before its checkpoint: the resumed run writes that row once."""
    X, y = synthetic_table(n=600)
    s = tiny_settings(**SETTINGS)
    whole = run_on_table(X, y, s, method="common", seed=0, run_dir=tmp_path / "whole")
    from fedstream.chfl.checkpoint import RunFolder

    with monkeypatch.context() as m:
        # saves: after rounds 1 and 2, then at the federation's end (after round 3's row): crash there,
        # with the rows of rounds 2 and 3 in metrics.csv but not in the last checkpoint
        _crash_after(m, RunFolder, "save", 2)
        with pytest.raises(Crash):
            run_on_table(X, y, s, method="common", seed=0, run_dir=tmp_path / "part")
    assert len(_rows(tmp_path / "part")) == 3
    assert len(load_torch(tmp_path / "part" / CHECKPOINT)["rows"]) == 1
    resumed = run_on_table(X, y, s, method="common", seed=0, run_dir=tmp_path / "part")
    assert untimed(resumed, "resumed") == untimed(whole, "resumed")
    assert _rows(tmp_path / "part") == _rows(tmp_path / "whole")


def test_resume_false_starts_afresh(tmp_path, monkeypatch):
    X, y = synthetic_table(n=600)
    s = tiny_settings(**SETTINGS)
    with monkeypatch.context() as m:
        _crash_after(m, Client, "train_epochs", 3)
        with pytest.raises(Crash):
            run_on_table(X, y, s, method="chfl", seed=0, run_dir=tmp_path)
    fresh = run_on_table(X, y, s, method="chfl", seed=0, run_dir=tmp_path, resume=False)
    assert not fresh["resumed"]
    assert untimed(fresh, "resumed") == untimed(run_on_table(X, y, s, method="chfl", seed=0), "resumed")


def test_checkpoint_of_another_run_is_refused_naming_the_key(tmp_path, monkeypatch):
    X, y = synthetic_table(n=600)
    with monkeypatch.context() as m:
        _crash_after(m, Client, "train_epochs", 2)
        with pytest.raises(Crash):
            run_on_table(X, y, tiny_settings(**SETTINGS), method="chfl", seed=0, run_dir=tmp_path)
    with pytest.raises(CheckpointError, match=r"belongs to another run \(chfl.rounds = 3 there, 4 here\)"):
        run_on_table(X, y, tiny_settings(lrs=(1e-2, 3e-3), rounds=4), method="chfl", seed=0, run_dir=tmp_path)
    with pytest.raises(CheckpointError, match=r"seed = 0 there, 1 here"):
        run_on_table(X, y, tiny_settings(**SETTINGS), method="chfl", seed=1, run_dir=tmp_path)
    (tmp_path / CHECKPOINT).write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(CheckpointError, match=r"checkpoint.pt: cannot read the checkpoint"):
        run_on_table(X, y, tiny_settings(**SETTINGS), method="chfl", seed=0, run_dir=tmp_path)


def test_checkpoint_is_weights_only_and_holds_the_whole_state(tmp_path, monkeypatch):
    X, y = synthetic_table(n=600)
    with monkeypatch.context() as m:
        _crash_after(m, Client, "train_epochs", 5)  # federation 1, round 3 of 3 under way
        with pytest.raises(Crash):
            run_on_table(X, y, tiny_settings(**SETTINGS), method="chfl", seed=0, run_dir=tmp_path)
    saved = load_torch(tmp_path / CHECKPOINT)  # weights_only at both levels
    state = saved["state"]
    assert (state["lr_index"], state["round"]) == (0, 2)
    assert len(state["clients"]) == 2 and {"rng", "heads", "opt_heads", "common"} <= set(state["clients"][0])
    assert state["server"]["round"] == 2 and state["ledger"]["down"][0] > 0
    assert (
        len(saved["rows"]) == 1
    )  # θ^1 evaluated; θ^2 is evaluated after this checkpoint and saved["identity"]["method"] == "chfl"


# -- the stream form --------------------------------------------------------------------------

STREAM = {"clients": 3, "hidden": (16,), "batch": 8, "sync_every": 4, "eval_every": 5, "lr": 1e-2, "mu": 0.5,
          "late_join": 0.5, "stats_rows": 32}


@pytest.mark.parametrize("method", ["chfl", "local"])
@pytest.mark.parametrize("ticks", [3, 9, 22])
def test_stream_interrupted_and_resumed_equals_uninterrupted(tmp_path, monkeypatch, method, ticks):
    X, y = synthetic_table(n=600)
    s = StreamSettings(**STREAM)
    whole = run_stream_on_table(X, y, s, method=method, seed=1, run_dir=tmp_path / "whole")
    with monkeypatch.context() as m:
        _crash_after(m, stream_mod.LocalStreamCohort, "tick", ticks)
        with pytest.raises(Crash):
            run_stream_on_table(X, y, s, method=method, seed=1, run_dir=tmp_path / "part")
    resumed = run_stream_on_table(X, y, s, method=method, seed=1, run_dir=tmp_path / "part")
    assert resumed["resumed"] == (method == "chfl" and ticks >= s.sync_every)  # local: nothing to sync at
    assert untimed(resumed, "resumed") == untimed(whole, "resumed")
    assert _rows(tmp_path / "part") == _rows(tmp_path / "whole")
    assert [float(r["acc"]) for r in _rows(tmp_path / "whole")] == pytest.approx(
        [p["acc"] for p in whole["curve"]]
    )


# -- the command line and the experiment runner -------------------------------------------------

TINY_CLI = [
    "--set",
    "chfl.max_rows=700",
    "--set",
    "chfl.hidden=8",
    "--set",
    "chfl.rounds=2",
    "--set",
    "chfl.local_epochs=1",
    "--set",
    "chfl.lrs=0.01,0.003",
    "--set",
    "chfl.mus=0,1",
    "--quiet",
]


def test_cli_resume(tmp_path, monkeypatch, data_root):
    from fedstream.cli import main

    require(data_root, "covertype_kaggle/train.csv.gz")
    common = ["--set", f"data.root={data_root}", *TINY_CLI]
    assert main(["run", "chfl-covertype", "--out", str(tmp_path / "whole"), *common]) == 0
    with monkeypatch.context() as m:
        _crash_after(m, Client, "train_epochs", 13)  # 5 clients x 2 rounds per lr: the second lr's round 1
        with pytest.raises(Crash):
            main(["run", "chfl-covertype", "--out", str(tmp_path / "part"), *common])
    # an existing checkpoint is not overwritten silently
    assert main(["run", "chfl-covertype", "--out", str(tmp_path / "part"), *common]) == 2
    assert main(["run", "chfl-covertype", "--out", str(tmp_path / "part"), "--resume", *common]) == 0
    whole, part = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("whole", "part"))
    assert part["resumed"] and not whole["resumed"]
    assert untimed(part, "resumed") == untimed(whole, "resumed")
    assert _rows(tmp_path / "part") == _rows(tmp_path / "whole")
    assert not (tmp_path / "part" / CHECKPOINT).exists()  # finished: the summary marks it
    assert main(["run", "chfl-covertype", "--out", str(tmp_path / "part"), "--resume", *common]) == 2


def test_experiment_runner_skips_finished_and_resumes_interrupted(tmp_path, monkeypatch, data_root):
    from fedstream.experiments.definition import load_experiment
    from fedstream.experiments.runner import run_experiment

    require(data_root, "covertype_kaggle/train.csv.gz")
    exp = load_experiment("chfl-table3")
    sets = [f"data.root={data_root}", "chfl.max_rows=700", "chfl.hidden=8", "chfl.rounds=2", "chfl.lrs=0.01"]
    whole = run_experiment(exp, scale="small", out=tmp_path / "whole", sets=sets, workers=1)
    with monkeypatch.context() as m:
        # grid order: 2 clients x (chfl, common, local) = 3 x 4 train_epochs calls, then 5 clients x 2
        # rounds of chfl: crash in its second round, after its first checkpoint
        _crash_after(m, Client, "train_epochs", 19)
        with pytest.raises(Crash):
            run_experiment(exp, scale="small", out=tmp_path / "part", sets=sets, workers=1)
    finished = {r["name"]: (tmp_path / "part" / r["folder"] / "summary.json").stat().st_mtime_ns
                for r in whole["runs"] if (tmp_path / "part" / r["folder"] / "summary.json").exists()}
    assert len(finished) == 3
    interrupted = next(r for r in whole["runs"] if r["name"] not in finished)
    assert (tmp_path / "part" / interrupted["folder"] / CHECKPOINT).exists()
    run_experiment(exp, scale="small", out=tmp_path / "part", sets=sets, workers=1)
    for r in whole["runs"]:
        a, b = (
            json.loads((tmp_path / d / r["folder"] / "summary.json").read_text()) for d in ("whole", "part")
        )
        assert untimed(a, "resumed") == untimed(b, "resumed")
        assert b["resumed"] == (r["name"] == interrupted["name"])
        if r["name"] in finished:  # skipped, not rerun
            assert (tmp_path / "part" / r["folder"] / "summary.json").stat().st_mtime_ns == finished[
                r["name"]
            ]
