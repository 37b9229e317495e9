"""Runs that fail say so (issue 20, section 2): divergence, checkpoints that cannot be trusted,
output folders that cannot be written, a finished run that would be overwritten."""

import errno
import json
import os

import numpy as np
import pytest

from fedstream.cli import main
from fedstream.errors import DivergedError, NonFiniteError
from fedstream.runs.batch import one_after_another, run_batch
from fedstream.runs.checkpoint import load_checkpoint, save_checkpoint
from fedstream.runs.files import atomic_write, remove_stale_temporaries
from fedstream.runs.folder import RunFolder

DIVERGING = ["--set", "optimizer.lr=0.3", "--set", "rounds=2000", "--set", "eval.interval=1000"]
VFL_SETS = [f"--set={k}={v}" for k, v in {
    "data.train_rows": 600, "data.test_rows": 200, "model.hidden": 16, "model.embedding": 8,
    "train.batch_size": 50, "train.epochs": 1}.items()]
CHFL_SETS = [f"--set={k}={v}" for k, v in {
    "chfl.max_rows": 700, "chfl.hidden": 8, "chfl.rounds": 1, "chfl.local_epochs": 1, "chfl.lrs": "0.01",
    "chfl.mus": "0"}.items()]
TASKS = {  # preset, extra sets, checkpoint file
    "ovfl": ("ovfl-imnist", ["--set", "rounds=200", "--set", "eval.interval=100"], "checkpoint.npz"),
    "vfl": ("vfl-mnist", VFL_SETS, "checkpoint.pt"),
    "chfl": ("chfl-covertype", CHFL_SETS, "checkpoint.pt"),
}


def run(*args):
    return main(["run", "--quiet", *args])


def one_line_error(capsys, *needles):
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error:") == 1, err
    for needle in needles:
        assert needle in err.replace("\n", ""), (needle, err)
    return err


# -- divergence --------------------------------------------------------------------------------
def test_a_diverged_online_run_exits_2_and_its_summary_says_so(tmp_path, data_root, capsys):
    """Once the server's output layer is NaN its gradients are exactly 0.0: the messages stay finite,
    and before the parameter check this run exited 0 with an error of 0.90."""
    out = tmp_path / "run"
    assert run("ovfl-imnist", f"--set=data.root={data_root}", *DIVERGING, "--out", str(out)) == 2
    one_line_error(capsys, "training diverged at round 1000", "server holds NaN", "optimizer.lr = 0.3")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["diverged"] is True and summary["diverged_at"] == 1000 and summary["rounds"] == 1000
    assert not (out / "checkpoint.npz").exists()  # a NaN model is never checkpointed
    assert run("ovfl-imnist", f"--set=data.root={data_root}", *DIVERGING) == 2  # without --out too


def test_a_checkpoint_holding_nan_refuses_to_resume(tmp_path, data_root, capsys):
    out = tmp_path / "run"
    sets = [f"--set=data.root={data_root}", "--set=eval.interval=100", "--set=checkpoint.every=100"]
    assert run("ovfl-imnist", *sets, "--set=rounds=200", "--out", str(out)) == 0
    state, meta = load_checkpoint(out / "checkpoint.npz")
    key = next(k for k in state if k.startswith("server.") and state[k].dtype.kind == "f")
    state[key] = np.full_like(state[key], np.nan)
    save_checkpoint(out / "checkpoint.npz", state, meta)  # a valid hash: only the NaN is wrong
    assert run("ovfl-imnist", *sets, "--set=rounds=400", "--out", str(out), "--resume") == 2
    one_line_error(capsys, "checkpoint.npz", "server holds NaN")


def test_tuning_records_a_silently_diverged_candidate(tmp_path, data_root, monkeypatch):
    """The candidate's parameters go NaN while its messages stay finite (as with a NaN output layer)."""
    from fedstream.experiments.definition import load_experiment
    from fedstream.experiments.runner import run_experiment
    from fedstream.ovfl.engine import OnlineVFL
    from tests.test_experiments import TINY

    play = OnlineVFL.play_chunk

    def poison(self, chunk, X, y, end, hooks):
        if self.config["optimizer.lr"] == 0.02:
            for p in self.server.model.parameters():
                p[...] = np.nan
        return play(self, chunk, X, y, end, hooks)

    monkeypatch.setattr(OnlineVFL, "play_chunk", poison)
    (tmp_path / "tiny.toml").write_text(TINY)
    out = tmp_path / "out"
    run_experiment(load_experiment(tmp_path / "tiny.toml"), scale="small", out=out,
                   sets=[f"data.root={data_root}"], workers=1)
    tuning = json.loads((out / "tuning.json").read_text())
    for row in tuning.values():
        assert row["diverged"] == [0.02] and row["chosen"] == 0.001
    summary = json.loads((out / "tuning" / "ogd-0.02" / "summary.json").read_text())
    assert summary["diverged"] is True and summary["diverged_at"] == 200  # the first interval


def test_a_stacked_sweep_retires_a_silently_diverged_run(tmp_path, data_root):
    from fedstream.experiments.sweep import expand_grid, sweep

    sets = [f"data.root={data_root}", "rounds=5000", "eval.interval=1000", "checkpoint.every=0"]
    specs = expand_grid("ovfl-imnist", sets, ["optimizer.lr=0.01,0.3"], tmp_path)
    stacked = sweep(specs, workers=1, stack=True)
    alone = sweep(expand_grid("ovfl-imnist", sets, ["optimizer.lr=0.01,0.3"], tmp_path / "alone"), workers=1)
    assert stacked[1]["diverged"] is True and "diverged" not in stacked[0]
    assert alone[1]["diverged"] is True and stacked[0]["accumulated_error"] == alone[0]["accumulated_error"]


def test_batch_tasks_write_the_same_diverged_fields(tmp_path):
    def blows_up(config, out, progress, resume):
        raise NonFiniteError("gradient of party 1 holds NaN or inf")

    config = {"task": "vfl", "optimizer.lr": 1.0}
    with pytest.raises(DivergedError, match="training diverged"):
        run_batch(config, tmp_path / "a", blows_up)
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert a["diverged"] is True and a["diverged_at"] == 0 and "holds NaN" in a["error"]
    from fedstream.runs.task import RunSpec

    many = one_after_another(lambda c, o, p, r: run_batch(c, o, blows_up, p, r))
    b = many([RunSpec("b", config, tmp_path / "b")], lambda name, units: None)["b"]
    assert b == json.loads((tmp_path / "b" / "summary.json").read_text()) and b["diverged"] is True


# -- checkpoints -------------------------------------------------------------------------------
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("damage", ["empty", "text", "flipped"])
def test_a_damaged_or_foreign_checkpoint_exits_2_naming_it(task, damage, tmp_path, data_root, capsys,
                                                          monkeypatch):
    preset, sets, name = TASKS[task]
    out = tmp_path / "run"
    sets = [f"--set=data.root={data_root}", *sets]
    path = out / name
    if damage == "flipped":
        if task == "chfl":  # a finished CHFL run deletes its checkpoint: stop one half-way
            from fedstream.chfl.client import Client
            from tests.test_chfl_checkpoint import Crash, _crash_after

            with monkeypatch.context() as m:
                _crash_after(m, Client, "train_epochs", 7)
                with pytest.raises(Crash):
                    run(preset, *sets, "--set=chfl.rounds=2", "--out", str(out))
            sets.append("--set=chfl.rounds=2")
        else:
            assert run(preset, *sets, "--out", str(out)) == 0
        capsys.readouterr()
        assert path.exists()
        data = bytearray(path.read_bytes())
        for i in range(len(data) // 2, len(data) // 2 + 16):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
        (out / "summary.json").unlink(missing_ok=True)
    else:
        out.mkdir()
        path.write_bytes(b"" if damage == "empty" else b"this is not a checkpoint\n")
    assert run(preset, *sets, "--out", str(out), "--resume") == 2
    one_line_error(capsys, str(path))


@pytest.mark.parametrize("task", TASKS)
def test_a_second_run_into_the_same_out_is_refused_naming_the_holder(task, tmp_path, data_root, capsys):
    import subprocess
    import sys

    preset, sets, _ = TASKS[task]
    out = tmp_path / "run"
    code = ("import sys, time; from fedstream.runs.folder import RunFolder\n"
            "RunFolder(sys.argv[1]).lock(); print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True,
                              env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert run(preset, f"--set=data.root={data_root}", *sets, "--out", str(out)) == 2
        one_line_error(capsys, f"{out} is in use by another run (process {holder.pid})")
    finally:
        holder.kill()
        holder.wait()


# -- output errors -----------------------------------------------------------------------------
@pytest.mark.parametrize("task", TASKS)
def test_out_being_a_file_is_one_line(task, tmp_path, data_root, capsys):
    preset, sets, _ = TASKS[task]
    (tmp_path / "file").write_text("x")
    assert run(preset, f"--set=data.root={data_root}", *sets, "--out", str(tmp_path / "file")) == 2
    one_line_error(capsys, str(tmp_path / "file"))


@pytest.mark.parametrize("task", TASKS)
def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(task, tmp_path, data_root, capsys, monkeypatch):
    preset, sets, _ = TASKS[task]
    out = tmp_path / "run"

    real_fsync, calls = os.fsync, []

    def full(fd):  # config.yaml and metrics.csv fit; the disk is full from the checkpoint on
        calls.append(fd)
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)  # every atomic write flushes with fsync before its rename
    assert run(preset, f"--set=data.root={data_root}", *sets, "--out", str(out)) == 2
    one_line_error(capsys, "No space left on device", str(out))
    assert len(calls) > 2 and not [p for p in out.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("task", TASKS)
def test_a_read_only_folder_is_one_line(task, tmp_path, data_root, capsys, monkeypatch):
    preset, sets, _ = TASKS[task]
    out = tmp_path / "run"
    out.mkdir()
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if str(path).startswith(str(out)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)  # root ignores chmod: refuse writes by hand
    assert run(preset, f"--set=data.root={data_root}", *sets, "--out", str(out)) == 2
    one_line_error(capsys, "Permission denied", str(out))


def test_temporary_files_of_a_killed_write_are_removed_on_the_next_start(tmp_path, data_root):
    out = tmp_path / "run"
    out.mkdir()
    stale = [out / "checkpoint.npz.1a2b3c4d.tmp", out / "metrics.csv.deadbeef.tmp"]
    for p in stale:
        p.write_bytes(b"half a file")
    (out / "notes.tmp").write_text("not ours")
    assert run("ovfl-imnist", f"--set=data.root={data_root}", "--set=rounds=100", "--out", str(out)) == 0
    assert not any(p.exists() for p in stale) and (out / "notes.tmp").exists()
    atomic_write(out / "x.json", "{}")
    assert remove_stale_temporaries(out) == []


def test_a_finished_online_run_without_its_checkpoint_is_not_overwritten(tmp_path, data_root, capsys):
    out = tmp_path / "run"
    sets = [f"--set=data.root={data_root}", "--set=rounds=200", "--set=eval.interval=100"]
    assert run("ovfl-imnist", *sets, "--out", str(out)) == 0
    before = (out / "summary.json").read_text()
    (out / "checkpoint.npz").unlink()
    assert run("ovfl-imnist", *sets, "--out", str(out)) == 2
    one_line_error(capsys, "summary.json exists", "finished")
    assert (out / "summary.json").read_text() == before


def test_online_summary_and_metrics_report_cpu_beside_wall_time(tmp_path, data_root):
    out = tmp_path / "run"
    assert run("ovfl-imnist", f"--set=data.root={data_root}", "--set=rounds=400", "--set=eval.interval=200",
               "--out", str(out)) == 0
    s = json.loads((out / "summary.json").read_text())
    for side in ("client", "server"):
        assert 0 <= s[f"{side}_cpu_seconds"] <= s[f"{side}_compute_seconds"]  # 0 without a cycle counter
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "client_cpu_seconds" in header and "client_compute_seconds" in header
    assert RunFolder(out).read_summary()["rounds"] == 400


class _Touch:
    """Unpickling this would create ``path`` (what a malicious checkpoint could do instead)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_torch_checkpoints_are_loaded_with_weights_only(tmp_path):
    import torch

    from fedstream.runs.checkpoint import CheckpointError
    from fedstream.runs.torch_checkpoint import load_torch, save_torch

    marker = tmp_path / "ran"
    save_torch(tmp_path / "inner.pt", {"w": torch.ones(2), "x": _Touch(marker)})  # hashed, code inside
    torch.save({"fedstream": "checkpoint", "x": _Touch(marker)}, tmp_path / "outer.pt")
    for name in ("inner.pt", "outer.pt"):
        with pytest.raises(CheckpointError, match=f"{name}: cannot read the checkpoint"):
            load_torch(tmp_path / name)
    assert not marker.exists()


def test_batch_checkpoints_holding_nan_refuse_to_resume(tmp_path, data_root, capsys):
    import math

    from fedstream.runs.torch_checkpoint import load_torch, save_torch

    out = tmp_path / "vfl"
    sets = [f"--set=data.root={data_root}", *VFL_SETS]
    assert run("vfl-mnist", *sets, "--out", str(out)) == 0
    payload = load_torch(out / "checkpoint.pt")
    name = next(iter(payload["server"]))
    payload["server"][name].fill_(math.nan)
    save_torch(out / "checkpoint.pt", payload)  # a valid hash: only the NaN is wrong
    (out / "summary.json").unlink()
    capsys.readouterr()
    assert run("vfl-mnist", *sets, "--set=train.epochs=2", "--out", str(out), "--resume") == 2
    one_line_error(capsys, "checkpoint.pt", "server holds NaN")

    import torch

    from fedstream.chfl.checkpoint import FORMAT, SIMULATOR, read_checkpoint
    from fedstream.runs.checkpoint import CheckpointError

    path = tmp_path / "chfl.pt"
    save_torch(path, {"format": FORMAT, "kind": SIMULATOR, "identity": {}, "rows": [],
                      "state": {"clients": [{"w": torch.tensor([1.0, math.nan])}]}})
    with pytest.raises(CheckpointError, match="chfl.pt: checkpoint refused: its state holds NaN"):
        read_checkpoint(path)


def test_a_batch_vfl_model_gone_nan_stops_at_the_epoch_checkpoint(tmp_path, data_root, capsys, monkeypatch):
    """A NaN model can send finite messages; the epoch's checkpoint checks the parameters."""
    import math

    import fedstream.vfl.trainer as trainer

    play = trainer.play_epochs

    def poisoned(settings, data, cohort, server, *args, after_epoch=None, **kwargs):
        def poison_then_save(epoch, step, rows):
            for p in server.model.parameters():
                p.data.fill_(math.nan)
            after_epoch(epoch, step, rows)
        return play(settings, data, cohort, server, *args, after_epoch=poison_then_save, **kwargs)

    monkeypatch.setattr(trainer, "play_epochs", poisoned)
    out = tmp_path / "run"
    assert run("vfl-mnist", f"--set=data.root={data_root}", *VFL_SETS, "--out", str(out)) == 2
    one_line_error(capsys, "training diverged in epoch 1: the model of server holds NaN")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["diverged"] is True and summary["diverged_at"] == 0
    assert not (out / "checkpoint.pt").exists()
