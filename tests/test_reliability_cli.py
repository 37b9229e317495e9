"""Runs that fail say so (issue 20, section 2): signals, orphaned workers, the report on damaged
folders, and the smaller input checks (seed range, YAML duplicate keys, a byte-order mark, --out "")."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedstream.cli import main
from fedstream.config import load_config
from fedstream.data.tabular import read_uci_csv
from fedstream.errors import ConfigError
from fedstream.runs.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]


def _env(data_root) -> dict:
    return os.environ | {"PYTHONPATH": str(ROOT / "src"), "FEDSTREAM_DATA": str(data_root)}


def _wait_for(predicate, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _children(pid: int) -> list[int]:
    """Every process whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


# -- signals and workers -----------------------------------------------------------------------
def test_sigterm_is_handled_like_ctrl_c(tmp_path, data_root):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedstream", "run", "ovfl-imnist", "--quiet", "--set", "rounds=100000000",
         "--set", f"data.root={data_root}",
         "--set", "eval.interval=500", "--set", "checkpoint.every=500", "--out", str(out)],
        env=_env(data_root), stderr=subprocess.PIPE, text=True)
    assert _wait_for(lambda: (out / "checkpoint.npz").exists(), 60)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 130, err
    assert "interrupted: a run with --out continues from its last checkpoint with --resume" in err
    assert "Traceback" not in err
    at = load_checkpoint(out / "checkpoint.npz")[1]["round"]
    assert main(["run", "ovfl-imnist", "--quiet", "--set", f"data.root={data_root}",
                 "--set", f"rounds={at + 500}", "--set", "eval.interval=500", "--set", "checkpoint.every=500",
                 "--out", str(out), "--resume"]) == 0  # the lock was released and the checkpoint resumes


def test_sigterm_stops_a_sweep_and_its_workers(tmp_path, data_root):
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedstream", "sweep", "ovfl-imnist", "--grid", "optimizer.lr=0.01,0.02",
         "--set", "rounds=100000000", "--set", f"data.root={data_root}", "--out", str(tmp_path),
         "--workers", "2", "--quiet"], env=_env(data_root), stderr=subprocess.PIPE, text=True)
    assert _wait_for(lambda: len(list(tmp_path.glob("*/metrics.csv"))) == 2, 90)
    children = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 130 and "interrupted: rerun the same command" in err, err
    assert _wait_for(lambda: not [c for c in children if _alive(c)], 10)


def test_kill_9_of_experiment_run_leaves_no_process_behind(tmp_path, data_root):
    from tests.test_experiments import TINY

    definition = tmp_path / "tiny.toml"
    definition.write_text(TINY.replace("rounds = { small = 300 }", "rounds = { small = 100000000 }"))
    out = tmp_path / "out"
    parent = subprocess.Popen(
        [sys.executable, "-m", "fedstream", "experiment", "run", str(definition), "--out", str(out),
         "--workers", "2", "--quiet"], env=_env(data_root), stderr=subprocess.DEVNULL)
    started = lambda: len(list((out / "tuning").glob("*/metrics.csv"))) >= 2  # noqa: E731
    assert _wait_for(started, 90)
    children = _children(parent.pid)
    assert len(children) >= 2
    parent.kill()
    parent.wait()
    left = lambda: [c for c in children if _alive(c)]  # noqa: E731
    _wait_for(lambda: not left(), 15)  # the watchers poll every 2 s
    stray = left()
    for pid in stray:  # do not leave them running when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not stray, [Path(f"/proc/{p}/cmdline").read_bytes() for p in stray if _alive(p)]


# -- the report on damaged folders -------------------------------------------------------------
def test_report_skips_runs_it_cannot_read_and_names_them(tmp_path, data_root, capsys):
    from fedstream.experiments.definition import load_experiment
    from fedstream.experiments.runner import run_experiment
    from tests.test_experiments import TINY

    (tmp_path / "tiny.toml").write_text(TINY)
    out = tmp_path / "out"
    run_experiment(load_experiment(tmp_path / "tiny.toml"), scale="small", out=out,
                   sets=[f"data.root={data_root}"], workers=1)
    (out / "runs" / "ogd" / "summary.json").write_text("[1, 2, 3]")  # valid JSON, not an object
    with open(out / "runs" / "dlr" / "metrics.csv", "a") as fh:
        fh.write("600,not a number,0.5,1,0.1,0.2,0.1\n")
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    err = capsys.readouterr().err.replace("\n", "")
    assert "Traceback" not in err and "warning: run 'ogd' skipped" in err and "not a JSON object" in err
    assert "warning: run 'dlr' skipped" in err and "metrics.csv: a row is not numeric" in err
    assert "'ogd' skipped" in (out / "report.md").read_text()


# -- smaller ones ------------------------------------------------------------------------------
def test_seed_is_bounded_to_what_the_generators_take():
    """torch.manual_seed takes at most 2**64 - 1 and the runs seed generators with seed + offsets."""
    assert load_config(None, {"seed": 2**63 - 1})["seed"] == 2**63 - 1
    for bad in (2**63, 2**64, -1):
        with pytest.raises(ConfigError, match="seed .* out of range"):
            load_config(None, {"seed": bad})
    with pytest.raises(ConfigError, match="seed"):
        load_config("vfl-mnist", [f"seed={2**64}"])


def test_yaml_duplicate_keys_are_refused_naming_key_and_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("task: ovfl\noptimizer:\n  lr: 0.1\n  name: dlr\n  lr: 0.2\n")
    with pytest.raises(ConfigError, match=r"run\.yaml.*duplicate key 'lr'"):
        load_config(str(path))
    path.write_text("seed: 1\nseed: 2\n")
    with pytest.raises(ConfigError, match="duplicate key 'seed'"):
        load_config(str(path))
    path.write_text("seed: 1\noptimizer: {lr: 0.1}\n")
    assert load_config(str(path))["optimizer.lr"] == 0.1


@pytest.mark.parametrize("gz", [False, True])
def test_a_higgs_file_with_a_byte_order_mark_and_no_header_keeps_its_first_row(tmp_path, gz):
    rows = [",".join(["1" if i % 2 else "0"] + [f"{i}.{j}" for j in range(28)]) for i in range(3)]
    data = b"\xef\xbb\xbf" + "\n".join(rows).encode() + b"\n"
    path = tmp_path / ("HIGGS.csv.gz" if gz else "HIGGS.csv")
    path.write_bytes(gzip.compress(data) if gz else data)
    X, y = read_uci_csv(path, n_features=28, name="HIGGS")
    assert X.shape == (3, 28) and y.tolist() == [0, 1, 0] and X[0, 0] == pytest.approx(0.0)


@pytest.mark.parametrize("command", [["run", "ovfl-imnist"], ["sweep", "ovfl-imnist"],
                                     ["experiment", "run", "ovfl-table1"]])
def test_an_empty_out_is_refused(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main([*command, "--out", ""])
    assert exc.value.code == 2 and "--out: expected a folder, got an empty path" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_diverged_summaries_are_read_back_by_the_tuning(tmp_path):
    from fedstream.experiments.runner import diverged

    assert diverged({"diverged": True}) and diverged({"diverged_at": 0}) and not diverged({"rounds": 3})
    assert json.dumps({"diverged": True})  # a plain JSON boolean in summary.json
