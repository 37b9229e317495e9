"""The contract of a task package (``ovfl``, ``vfl``, ``chfl``): one :class:`Task` object each.

The command line, the sweeps and the experiments see a task only through this object (found by
name in :data:`fedstream.tasks.TASKS`); nothing outside the task packages branches on the task's
name. A new task is a package with a ``task.py`` exposing ``TASK`` and one line in
:mod:`fedstream.tasks`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any

Progress = Callable[[dict], None]
"""Receives progress events: ``{"event": "round", "round", "rounds", "error"}`` (online),
``{"event": "step" | "epoch", ...}`` (batch VFL) or a dict of figures (CHFL)."""
Report = Callable[[str, int], None]
"""``report(run name, units done)`` of runs side by side (units: :attr:`Task.units`)."""


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep or an experiment: its name (from the grid values), resolved config and folder."""

    name: str
    config: dict
    out: Path


@dataclass(frozen=True)
class Task:
    """What a task package provides (the contract; every field is required unless it has a default).

    Running:
      ``simulate(config, out, progress, resume) -> summary``: run ``config`` in one process; with
      ``out`` (a folder) write config.yaml, metrics.csv (rows as produced), checkpoints and
      summary.json there; ``resume``: continue from the checkpoint in ``out``.
      ``run_many(specs, report, stack) -> {name: summary}``: run several specs of this task in this
      process (the sweep's worker); each resumes from its folder and writes its summary.
      ``checkpoint_name``: the checkpoint's file in a run folder. ``refuse_fresh``: files of ``out``
      that make a run without ``--resume`` an error. ``resume_needs_checkpoint``: ``--resume``
      without a checkpoint is an error before the run starts (else the run's loader reports it).
    Showing:
      ``title(config)``: one line for progress bars; ``summary_rows(summary)``: the title and the
      (label, value) rows of the CLI's table after a run; ``columns``: the summary.json figures of
      the report and sweep tables (:func:`fedstream.experiments.columns.column_value` names);
      ``index_fields(summary)``:
      extra fields of a run's entry in sweep.json; ``length(summary, config, curve)``: how far a
      run got, for the report ("600 rounds", "3 of 10 epochs (running)").
    Sweeps and experiments:
      ``finished(summary, config)``: whether a summary.json found in a run's folder completes that
      config; ``cost(config)``: relative cost (online-round units) to order the work;
      ``units(config)``: progress units of a run (rounds, or 1 for a whole run);
      ``tuning(config, rounds)``: the overrides of a shorter tuning run ({} if none);
      ``stack_key(config)``: runs with equal non-None keys may share batched kernels (``--stack``).
      ``warm(specs)``: load what the workers of a sweep of ``specs`` need (data, compiled kernels)
      once in the parent, before they fork from it; None: nothing to share.
    Config:
      ``fields``: the task's config keys (key -> :class:`fedstream.fields.Field`, or
      :class:`fedstream.fields.Shared` for a key declared once for several tasks);
      ``datasets``: the ``data.name`` values (the first is the default);
      ``check(config)``: the checks that involve several keys (ConfigError naming them).
    Deployment:
      ``deploy``: the module that holds the task's deployment adapter (``ADAPTER``, see
      :class:`fedstream.deploy.adapters.Adapter`); imported when a deployment starts, so that a task
      whose parties need PyTorch costs nothing to a process that does not deploy it. None: the task
      does not deploy.
      ``predict``: ``"module:function"`` that predicts rows with a finished run's final model
      (``fedstream predict``; :mod:`fedstream.predict`), imported when used. None: not yet.
    """

    name: str
    doc: str
    simulate: Callable[[dict, Path | None, Progress | None, bool], dict]
    run_many: Callable[[list[RunSpec], Report, bool], dict[str, dict]]
    checkpoint_name: str
    refuse_fresh: tuple[str, ...]
    resume_needs_checkpoint: bool
    title: Callable[[dict], str]
    summary_rows: Callable[[dict], tuple[str, list[tuple[str, str]]]]
    columns: tuple[str, ...]
    index_fields: Callable[[dict], dict]
    length: Callable[[dict | None, dict, list[dict]], str]
    finished: Callable[[dict, dict], bool]
    cost: Callable[[dict], float]
    units: Callable[[dict], int]
    tuning: Callable[[dict, int], dict]
    stack_key: Callable[[dict], Any]
    fields: Mapping[str, Any]
    datasets: tuple[str, ...]
    check: Callable[[dict], dict]
    deploy: str | None = None
    predict: str | None = None
    warm: Callable[[list[RunSpec]], None] | None = None


def entry_point(ref: str) -> Callable[..., Any]:
    """``"package.module:function"`` as a callable that imports its module on the first call.

    The trainers of ``vfl`` and ``chfl`` import PyTorch, which takes 1.5-2 s; the registry names them
    this way (as console scripts and Flower apps name theirs) so that the command line, the config
    loader and online VFL runs start without it.
    """
    module, _, name = ref.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{ref}, imported on the first call."
    return call
