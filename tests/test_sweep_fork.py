"""Sweep workers fork from a warmed-up parent on Linux (and spawn elsewhere)."""

import sys

import pytest

from fedstream.errors import FedstreamError
from fedstream.experiments import sweep as sweep_module
from fedstream.experiments.sweep import expand_grid, run_group, worker_context
from fedstream.ovfl.sweep import warm


def test_workers_fork_after_the_tasks_warm_up(tmp_path, monkeypatch):
    specs = expand_grid("ovfl-imnist", ["rounds=2"], ["optimizer.lr=0.01,0.02"], tmp_path)
    warmed = []
    task = sweep_module.get_task("ovfl")
    monkeypatch.setattr(sweep_module, "get_task", lambda name: type("T", (), {"warm": warmed.append})())
    monkeypatch.setattr(sys, "platform", "linux")
    assert worker_context(specs).get_start_method() == "fork"
    assert warmed == [specs]  # one call with the task's specs, in the parent
    monkeypatch.setattr(sys, "platform", "darwin")
    assert worker_context(specs).get_start_method() == "spawn"
    assert len(warmed) == 1  # nothing to warm for spawned workers
    assert task.warm is not None


def test_online_warm_up_writes_nothing(tmp_path):
    """The parent's warm-up plays throw-away runs: no run folder appears."""
    specs = expand_grid("ovfl-imnist", ["rounds=50"], ["optimizer.name=slr,dlr"], tmp_path / "runs")
    warm(specs)
    assert not (tmp_path / "runs").exists()


def test_online_warm_up_leaves_errors_to_the_workers(tmp_path):
    """A run whose data is missing is skipped by the warm-up; its worker reports the error, as before."""
    sets = ["rounds=50", f"data.root={tmp_path / 'nowhere'}"]
    specs = expand_grid("ovfl-imnist", sets, [], tmp_path / "runs")
    assert warm(specs) is None  # no error raised in the parent
    assert not (tmp_path / "runs").exists()
    with pytest.raises(FedstreamError, match="nowhere"):
        run_group(specs)  # what the worker plays: the error is its run's


@pytest.mark.parametrize("preset", ["vfl-mnist", "chfl-covertype"])
def test_workers_spawn_when_no_task_has_a_warm_up(tmp_path, monkeypatch, preset):
    """Batch VFL and CHFL have nothing to warm: their workers spawn fresh, even on Linux, rather than
    fork from a parent that imported torch."""
    specs = expand_grid(preset, [], ["seed=0,1"], tmp_path)
    assert sweep_module.get_task(specs[0].config["task"]).warm is None
    monkeypatch.setattr(sys, "platform", "linux")
    assert worker_context(specs).get_start_method() == "spawn"
