"""The experiment runner and the report: tuning, resume, side-by-side tables, figures, backends."""

import json

import pytest

from fedstream.cli import main
from fedstream.errors import ConfigError
from fedstream.experiments.definition import load_experiment
from fedstream.experiments.report import write_report
from fedstream.experiments.runner import run_experiment, total_rounds

TINY = """
name = "tiny"
title = "Tiny: OGD vs DLR"
source = "a test"
base = "ovfl-imnist"
[set]
"activation.name" = "random"
"checkpoint.every" = 200
[scale.small]
rounds = 600
"eval.interval" = 200
[scale.paper]
rounds = 6000
[grid]
"optimizer.name" = ["ogd", "dlr"]
[tune]
key = "optimizer.lr"
values = [0.001, 0.02]
rounds = { small = 300 }
[[paper]]
table = "Table X"
columns = ["accumulated_error", "total_mb", "activation_rate.0"]
rows = [
  { run = { "optimizer.name" = "ogd" }, values = [0.5, 0.1, 0.5] },
  { run = { "optimizer.name" = "dlr" }, values = [0.5, nan, 0.5] },
]
[[figure]]
kind = "curves"
title = "Run-time error"
[[figure]]
kind = "scatter"
title = "Communication vs error"
"""


@pytest.fixture
def tiny(tmp_path, data_root):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return load_experiment(path), [f"data.root={data_root}"]


def test_runner_tunes_runs_and_reports(tiny, tmp_path):
    exp, sets = tiny
    out = tmp_path / "out"
    assert total_rounds(exp, "small", sets) == 2 * 600 + 2 * 2 * 300
    index = run_experiment(exp, scale="small", out=out, sets=sets, workers=1)
    tuning = json.loads((out / "tuning.json").read_text())
    assert set(tuning) == {"ogd", "dlr"}
    for row in tuning.values():  # the choice is the candidate with the lowest accumulated error
        best = min(row["values"], key=row["values"].get)
        assert str(row["chosen"]) == best
    for run in index["runs"]:
        summary = json.loads((out / run["folder"] / "summary.json").read_text())
        assert summary["rounds"] == 600
        assert summary["config"]["optimizer.lr"] == tuning[run["name"]]["chosen"]
    report = write_report(out).read_text()
    assert "| ogd |" in report and "Table X" in report and "⚠" in report  # 0.1 MB vs ours: flagged
    assert "scaled ×10" in report  # cumulative columns projected to the paper's 6000 rounds
    pngs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert len(pngs) == 2 and all((out / "figures" / p).stat().st_size > 5000 for p in pngs)


def test_rerun_skips_finished_and_resumes_interrupted_runs(tiny, tmp_path):
    """A run stopped at its last checkpoint continues to the same result as an uninterrupted run."""
    exp, sets = tiny
    whole, split = tmp_path / "whole", tmp_path / "split"
    run_experiment(exp, scale="small", out=whole, sets=sets, workers=1)
    run_experiment(
        exp, scale="small", out=split, sets=[*sets, "rounds=400"], workers=1
    )  # "interrupted" at 400
    run_experiment(exp, scale="small", out=split, sets=sets, workers=1)  # resumed to 600
    for name in ("ogd", "dlr"):
        a = json.loads((whole / "runs" / name / "summary.json").read_text())
        b = json.loads((split / "runs" / name / "summary.json").read_text())
        for key in ("accumulated_error", "interval_errors", "bytes", "activation_rate"):
            assert a[key] == b[key], (name, key)
    stamp = (split / "runs" / "ogd" / "summary.json").stat().st_mtime_ns
    run_experiment(exp, scale="small", out=split, sets=sets, workers=1)  # finished: skipped
    assert (split / "runs" / "ogd" / "summary.json").stat().st_mtime_ns == stamp


@pytest.mark.slow  # starts a local Ray cluster (several processes): about 26 s on 2 cores
def test_ray_backend_runs_the_same_grid(tiny, tmp_path):
    pytest.importorskip("ray", reason="Ray is the optional extra fedstream[ray]")
    exp, sets = tiny
    local, remote = tmp_path / "local", tmp_path / "ray"
    run_experiment(exp, scale="small", out=local, sets=sets, workers=1)
    run_experiment(exp, scale="small", out=remote, sets=sets, backend="ray")
    for name in ("ogd", "dlr"):
        a = json.loads((local / "runs" / name / "summary.json").read_text())
        b = json.loads((remote / "runs" / name / "summary.json").read_text())
        assert a["accumulated_error"] == b["accumulated_error"] and a["bytes"] == b["bytes"]


def test_cli_experiment_list_run_and_report(tiny, tmp_path, capsys):
    exp, sets = tiny
    out = tmp_path / "cli"
    args = ["experiment", "run", str(exp.path), "--out", str(out), "--workers", "1", "--quiet"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").exists()
    assert main(["experiment", "list"]) == 0


@pytest.mark.parametrize("edit,needle", [
    (('"optimizer.name" = ["ogd", "dlr"]', '"optimizer.nam" = ["ogd", "dlr"]'), "optimizer.name"),
    (('kind = "scatter"', 'kind = "pie"'), "'kind'"),
    (('{ "optimizer.name" = "dlr" }', '{ "optimizer.name" = "slr" }'), "not in the grid values"),
    (("rounds = 600", "rounds = -1"), "rounds"),
])
def test_bad_definitions_name_file_and_key(tmp_path, edit, needle):
    path = tmp_path / "bad.toml"
    path.write_text(TINY.replace(*edit))
    with pytest.raises(ConfigError) as exc:
        load_experiment(path)
    assert needle in str(exc.value) and "bad.toml" in str(exc.value)


def test_report_needs_an_experiment_folder(tmp_path):
    assert main(["report", str(tmp_path)]) == 2


def test_a_diverging_candidate_loses_the_tuning_and_does_not_stop_the_others(tiny, tmp_path, monkeypatch):
    from fedstream.errors import DivergedError
    from fedstream.ovfl.engine import OnlineVFL

    play = OnlineVFL.play_chunk

    def blow_up_at_large_lr(self, chunk, X, y, end, hooks):
        if self.config["optimizer.lr"] == 0.02:
            raise DivergedError("training diverged at round 7", 7)
        return play(self, chunk, X, y, end, hooks)

    monkeypatch.setattr(OnlineVFL, "play_chunk", blow_up_at_large_lr)
    exp, sets = tiny
    out = tmp_path / "out"
    run_experiment(exp, scale="small", out=out, sets=sets, workers=1)
    tuning = json.loads((out / "tuning.json").read_text())
    assert all(row["chosen"] == 0.001 and row["values"]["0.02"] == float("inf") for row in tuning.values())
    diverged = json.loads((out / "tuning" / "ogd-0.02" / "summary.json").read_text())
    assert diverged["diverged_at"] == 7
    assert "diverged" in write_report(out).read_text()
