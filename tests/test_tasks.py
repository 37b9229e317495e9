"""The task registry: one Task object per task package, its config keys in the schema, and nothing
outside the task packages dispatching on the task's name."""

import dataclasses
import os
import re
from pathlib import Path

import pytest

from fedstream.cli import main
from fedstream.config import load_config
from fedstream.config.schema import KEYS_BY_TASK, SCHEMA
from fedstream.deploy.adapters import Adapter, adapter_for
from fedstream.errors import ConfigError
from fedstream.runs.folder import RunFolder
from fedstream.runs.task import Task
from fedstream.tasks import TASKS, get_task

SRC = Path(__file__).resolve().parents[1] / "src" / "fedstream"


def test_every_task_is_a_complete_task_object_named_as_its_package():
    assert list(TASKS) == ["ovfl", "vfl", "chfl"]
    for name, task in TASKS.items():
        assert isinstance(task, Task) and task.name == name
        assert type(task).__module__ == "fedstream.runs.task"
        for f in dataclasses.fields(Task):
            if f.name not in ("deploy", "predict", "warm"):  # optional: None says the task does not do it
                assert getattr(task, f.name) is not None, (name, f.name)
        adapter = adapter_for(name)  # its deployment adapter, through the registry
        assert adapter.task == name
        for method in ("check", "n_nodes", "node_data", "host", "server", "report"):  # no protocol stub
            assert getattr(type(adapter), method) is not getattr(Adapter, method), (name, method)
        config = load_config(None, {"task": name})  # the protocol's defaults where the task keeps them
        assert adapter.runtime_for(config) == adapter.runtime  # the default config takes the default
        assert (adapter.frame_limit(config) is None) == (name != "ovfl")  # only online VFL sizes its frames
    with pytest.raises(ConfigError, match="task = 'hfl': expected one of ovfl, vfl, chfl"):
        get_task("hfl")


@pytest.mark.parametrize("name", ["ovfl", "vfl", "chfl"])
def test_a_tasks_config_holds_its_keys_in_its_order_and_its_defaults(name):
    task = get_task(name)
    config = load_config(None, {"task": name})
    keys = ["task", "seed", "data.name", "data.root", "track.uri", "track.experiment", *task.fields]
    assert list(config) == list(KEYS_BY_TASK[name]) == keys
    assert config["data.name"] == task.datasets[0]
    assert all(name in SCHEMA[k].tasks for k in task.fields)
    assert task.check(config) is config


def test_nothing_outside_the_task_packages_dispatches_on_the_task_name():
    pattern = re.compile(r"""\[["']task["']\]\s*[!=]=|task\s*[!=]=\s*["'](ovfl|vfl|chfl)["']""")
    found = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] in ("ovfl", "vfl", "chfl"):
            continue
        lines = path.read_text().splitlines()
        found += [f"{rel}:{i}" for i, line in enumerate(lines, 1) if pattern.search(line)]
    assert found == []


def test_a_second_run_into_the_same_out_is_refused_naming_the_holder(tmp_path, capsys):
    with RunFolder(tmp_path / "out"):
        assert main(["run", "ovfl-imnist", "--quiet", "--out", str(tmp_path / "out")]) == 2
    assert f"in use by another run (process {os.getpid()})" in capsys.readouterr().err
