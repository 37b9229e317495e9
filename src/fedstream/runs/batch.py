"""What the batch tasks (batch VFL, CHFL) share around their trainers: the run folder's config and
summary, divergence as a summary, runs one after the other, and the CLI table's common rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedstream.errors import DivergedError, NonFiniteError
from fedstream.runs.folder import RunFolder, diverged_fields
from fedstream.runs.task import Report, RunSpec, Task

CHECKPOINT = "checkpoint.pt"
"""The checkpoint file of a batch task's run folder (vfl, chfl)."""

Train = Callable[[dict, Path | None, Callable | None, bool], dict]


def run_batch(config: dict, out: Path | None, train: Train, progress=None, resume: bool = False, *,
              checkpoint_name: str = "checkpoint.pt", discard_checkpoint: bool = False,
              final_name: str | None = None) -> dict:
    """Run ``train(config, out, progress, resume)``; with ``out``, write config.yaml first and
    summary.json (the result, the task and the resolved ``config``) last. ``discard_checkpoint``:
    once the summary marks the run finished, delete the checkpoint, or with ``final_name`` rename it
    so (the final model: a finished run has no checkpoint to resume). ``resume`` needs ``out``."""
    folder = RunFolder(out, checkpoint_name=checkpoint_name) if out is not None else None
    if folder is not None:
        folder.write_config(config)
    try:
        try:
            result = train(config, out, progress, resume and out is not None)
        except NonFiniteError as exc:  # both sides are our parties: the numbers blew up
            raise DivergedError(f"training diverged: {exc} (optimizer.lr = {config.get('optimizer.lr')}; "
                                "try a smaller one)", 0) from exc
    except DivergedError as exc:  # the summary says so, then the run fails with the message
        if folder is not None:
            folder.write_summary(diverged_summary(config, exc))
        raise
    summary = result | {"task": config["task"], "config": dict(config)}
    if folder is not None:  # the trainer wrote metrics.csv as it went
        folder.write_summary(summary, default=str)
        if discard_checkpoint and final_name and folder.checkpoint.exists():
            folder.checkpoint.replace(folder.path / final_name)  # finished: the summary marks it
        elif discard_checkpoint:
            folder.checkpoint.unlink(missing_ok=True)
    return summary


def diverged_summary(config: dict, exc: DivergedError) -> dict:
    """The summary.json of a batch run that diverged."""
    return {"task": config["task"], "config": dict(config)} | diverged_fields(exc)


def one_after_another(simulate: Callable) -> Callable[[list[RunSpec], Report, bool], dict[str, dict]]:
    """A task's ``run_many`` that runs its specs one after the other, each resumed from its folder;
    a run that diverges gets a summary saying so and the others go on."""

    def run_many(specs: list[RunSpec], report: Report, stack: bool = False) -> dict[str, dict]:
        summaries = {}
        for spec in specs:
            try:
                summaries[spec.name] = simulate(spec.config, spec.out, None, True)
            except DivergedError as exc:  # one run blowing up must not stop the others
                summaries[spec.name] = diverged_summary(spec.config, exc)
                RunFolder(spec.out).write_summary(summaries[spec.name])
            report(spec.name, 1)
        return summaries

    return run_many


def common_rows(s: dict) -> list[tuple[str, str]]:
    """The last rows of a batch task's CLI table: communication and wall time."""
    b = s.get("bytes", {})
    rows = []
    if b:
        mb = {k: b[k] / 2**20 for k in ("up", "down")}
        rows.append(("communication (MB, 2^20 B)",
                     f"{(b['up'] + b['down']) / 2**20:,.2f}  (up {mb['up']:,.2f}, down {mb['down']:,.2f})"))
    rows.append(("wall time (s)", f"{s.get('wall_seconds', float('nan')):.1f}"))
    return rows


def batch_title(config: dict) -> str:
    return f"{config['task']} on {config['data.name']}"


def batch_task(*, simulate: Callable, **own: Any) -> Task:
    """The :class:`Task` of a batch task (``vfl``, ``chfl``): ``own`` holds what is the task's own
    (name, doc, summary_rows, columns, length, cost, fields, datasets, check, deploy); the rest is
    what every batch task does: one run after the other, ``checkpoint.pt``, a whole run as one
    progress unit, no tuning runs and no stacks."""
    return Task(simulate=simulate, run_many=one_after_another(simulate), checkpoint_name=CHECKPOINT,
                refuse_fresh=("summary.json", CHECKPOINT), resume_needs_checkpoint=True, title=batch_title,
                index_fields=lambda r: {}, finished=lambda summary, config: True, units=lambda c: 1,
                tuning=lambda c, rounds: {}, stack_key=lambda c: None, **own)
