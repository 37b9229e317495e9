"""The tasks fedstream runs, by name: ``TASKS[config["task"]]`` is the task's :class:`Task` object.

Each task package exposes one object (``fedstream/<task>/task.py: TASK``) that says how to run,
show, sweep and check its configs (the contract: :class:`fedstream.runs.task.Task`). The command
line, the sweeps and the experiments go through it and never branch on the task's name.
"""

from __future__ import annotations

from fedstream.chfl.task import TASK as CHFL
from fedstream.errors import ConfigError
from fedstream.ovfl.task import TASK as OVFL
from fedstream.runs.task import Task
from fedstream.vfl.task import TASK as VFL

TASKS: dict[str, Task] = {t.name: t for t in (OVFL, VFL, CHFL)}

__all__ = ["TASKS", "Task", "get_task"]


def get_task(name: str) -> Task:
    """The task called ``name``; ConfigError listing the tasks otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        raise ConfigError(f"task = {name!r}: expected one of {', '.join(TASKS)}") from None
