"""Sweeps: grid expansion, side-by-side runs equal single runs, skip and resume."""

import json

import pytest

from fedstream.cli import main
from fedstream.errors import ConfigError
from fedstream.experiments.sweep import expand_grid, sweep, work_units
from fedstream.ovfl.engine import OnlineVFL
from tests.helpers.data import write_susy
from tests.helpers.runs import untimed


@pytest.fixture
def susy_root(tmp_path):
    """A small SUSY file in the UCI format (label + 18 features), written by the test."""
    return write_susy(tmp_path, 600, seed=1, shift=0.8)


def test_grid_expansion_names_and_errors(tmp_path):
    specs = expand_grid(
        "ovfl-imnist", ["rounds=10"], ["optimizer.name=ogd,dlr", "activation.name=full,random"], tmp_path
    )
    assert [s.name for s in specs] == ["ogd-full", "ogd-random", "dlr-full", "dlr-random"]
    assert specs[3].config["optimizer.name"] == "dlr" and specs[3].config["rounds"] == 10
    assert specs[0].out == tmp_path / "ogd-full"
    with pytest.raises(ConfigError, match="KEY=V1,V2"):
        expand_grid("ovfl-imnist", [], ["optimizer.name"], tmp_path)
    with pytest.raises(ConfigError, match="one of ogd, slr, dlr"):
        expand_grid("ovfl-imnist", [], ["optimizer.name=ogd,adam"], tmp_path)


def test_work_units_one_run_each_in_grid_order_or_stacks_together(tmp_path):
    specs = expand_grid("ovfl-imnist", [], ["optimizer.name=ogd,slr,dlr", "seed=1,2"], tmp_path)
    assert work_units(specs, 2) == [[s] for s in specs]  # free workers take the next run: no idle worker
    stacked = work_units(specs, 2, stack=True)
    assert sorted(s.name for g in stacked for s in g) == sorted(s.name for s in specs)
    for unit in stacked:
        assert len({s.config["optimizer.name"] for s in unit}) == 1


def test_side_by_side_runs_equal_single_runs_and_resume(susy_root, tmp_path):
    sets = [f"data.root={susy_root}", "rounds=300", "eval.interval=100", "checkpoint.every=100"]
    grid = ["optimizer.name=ogd,dlr", "activation.name=full,random"]
    specs = expand_grid("ovfl-susy", sets, grid, tmp_path / "sw")
    summaries = sweep(specs, workers=2)
    for spec, s in zip(specs, summaries):
        alone = OnlineVFL(spec.config).run()
        assert untimed(s) == untimed(alone), spec.name
        assert json.loads((spec.out / "summary.json").read_text())["rounds"] == 300
    # a second sweep with more rounds resumes every run from its checkpoint: equal to 500 at once
    longer = expand_grid("ovfl-susy", [*sets, "rounds=500"], grid, tmp_path / "sw")
    resumed = sweep(longer, workers=1)
    for spec, s in zip(longer, resumed):
        assert untimed(s) == untimed(OnlineVFL(spec.config).run()), spec.name
    # and a finished sweep is skipped: same summaries, nothing recomputed
    again = sweep(longer, workers=1)
    assert [untimed(a) for a in again] == [untimed(b) for b in resumed]
    assert [a["wall_seconds"] for a in again] == [b["wall_seconds"] for b in resumed]


def test_stacked_sweep_equals_single_runs_resumes_and_keeps_stacks_on_one_worker(susy_root, tmp_path):
    """``stack=True``: runs of one optimiser play as a stack of batched kernels; their summaries
    equal the runs alone, and a longer sweep resumes them (stacked) from their checkpoints."""
    sets = [f"data.root={susy_root}", "rounds=300", "eval.interval=100", "checkpoint.every=100"]
    grid = ["optimizer.name=ogd,dlr", "activation.name=full,random,event", "optimizer.lr=0.01,0.03"]
    specs = expand_grid("ovfl-susy", sets, grid, tmp_path / "sw")
    groups = work_units(specs, 2, stack=True)
    assert sorted(sorted({s.config["optimizer.name"] for s in g}) for g in groups) == [["dlr"], ["ogd"]]
    summaries = sweep(specs, workers=2, stack=True)
    for spec, s in zip(specs, summaries):
        assert untimed(s) == untimed(OnlineVFL(spec.config).run()), spec.name
    longer = expand_grid("ovfl-susy", [*sets, "rounds=500"], grid, tmp_path / "sw")
    for spec, s in zip(longer, sweep(longer, workers=1, stack=True)):
        assert untimed(s) == untimed(OnlineVFL(spec.config).run()), spec.name


def test_sweep_cli(susy_root, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["sweep", "ovfl-susy", "--quiet", "--set", f"data.root={susy_root}", "--set", "rounds=200",
                 "--grid", "optimizer.name=ogd,slr", "--out", str(out), "--workers", "1"]) == 0
    index = json.loads((out / "sweep.json").read_text())
    assert [r["name"] for r in index] == ["ogd", "slr"] and all(r["rounds"] == 200 for r in index)
    assert main(["sweep", "ovfl-susy", "--grid", "optimizer.lr=x", "--out", str(out)]) == 2
    assert "optimizer.lr" in capsys.readouterr().err


def test_sweep_finishes_a_run_checkpointed_at_its_end_without_summary(susy_root, tmp_path):
    """A crash between the last checkpoint and summary.json must not break the next sweep."""
    specs = expand_grid("ovfl-susy", [f"data.root={susy_root}", "rounds=200", "checkpoint.every=100"],
                        ["optimizer.name=ogd,dlr"], tmp_path / "sw")
    first = sweep(specs, workers=1)
    (specs[1].out / "summary.json").unlink()
    again = sweep(specs, workers=1)
    assert untimed(again[1]) == untimed(first[1]) and (specs[1].out / "summary.json").exists()


def test_sweep_cli_stack_flag_gives_the_same_index(susy_root, tmp_path):
    args = ["sweep", "ovfl-susy", "--quiet", "--set", f"data.root={susy_root}", "--set", "rounds=200",
            "--grid", "activation.name=full,random,event", "--workers", "1"]
    assert main([*args, "--out", str(tmp_path / "alone")]) == 0
    assert main([*args, "--out", str(tmp_path / "stacked"), "--stack"]) == 0
    rows = [json.loads((tmp_path / d / "sweep.json").read_text()) for d in ("alone", "stacked")]
    strip = lambda index: [untimed(r, "folder") for r in index]
    assert strip(rows[0]) == strip(rows[1])


@pytest.mark.parametrize("grid,match", [(["optimizer.name="], "no values"),
                                        (["vfl.clients=2,4", "activation.k=3"], "exceeds vfl.clients")])
def test_grid_problems_are_caught_before_any_run(tmp_path, grid, match):
    with pytest.raises(ConfigError, match=match):
        expand_grid("ovfl-imnist", [], grid, tmp_path)


def test_workers_exit_when_the_sweep_process_is_killed(tmp_path):
    """A killed sweep leaves no orphan worker running: each worker watches its parent."""
    import os
    import signal
    import subprocess
    import sys
    import textwrap
    import time

    script = textwrap.dedent(f"""
        import multiprocessing as mp, os, sys, time
        from fedstream.runs.workers import exit_with_parent
        def child(path):
            exit_with_parent(poll_seconds=0.1)
            open(path, "w").write(str(os.getpid()))
            time.sleep(60)
        if __name__ == "__main__":
            p = mp.get_context("spawn").Process(target=child, args=({str(tmp_path / 'pid')!r},))
            p.start()
            time.sleep(60)
    """)
    (tmp_path / "orphan.py").write_text(script)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "orphan.py")])
    pid_file = tmp_path / "pid"
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    child = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(50):  # the watcher polls every 0.1 s
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    raise AssertionError("the worker outlived its killed parent")
