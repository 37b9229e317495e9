"""The ``chfl`` task (continual horizontal FL, batch or stream mode) as the command line, sweeps and
experiments see it."""

from __future__ import annotations

from pathlib import Path

import fedstream.chfl.config as chfl_config
from fedstream.chfl.checkpoint import CHECKPOINT
from fedstream.chfl.settings import CHFLSettings, named_by_config
from fedstream.chfl.stream import StreamSettings, run_stream
from fedstream.chfl.trainer import run_chfl
from fedstream.fields import number_list
from fedstream.runs.batch import batch_title, common_rows, one_after_another, run_batch
from fedstream.runs.task import Progress, Task


def chfl_settings(config: dict) -> CHFLSettings:
    """The CHFL settings of a ``task = "chfl"`` config (batch mode)."""
    return CHFLSettings(
        dataset=config["data.name"],
        clients=config["chfl.clients"],
        common_ratio=config["chfl.common_ratio"],
        split=config["chfl.split"],
        split_index=config["chfl.split_index"],
        hidden=number_list(config["chfl.hidden"], int),
        rounds=config["chfl.rounds"],
        local_epochs=config["chfl.local_epochs"],
        batch_size=config["chfl.batch_size"],
        lrs=number_list(config["chfl.lrs"]),
        mus=number_list(config["chfl.mus"]),
        prox_mu=config["chfl.prox_mu"],
        max_rows=config["chfl.max_rows"],
        shared_baselines=tuple(b.strip() for b in config["chfl.baselines"].split(",") if b.strip()),
    )


def stream_settings(config: dict) -> StreamSettings:
    """The streaming-CHFL settings of a ``task = "chfl"``, ``chfl.mode = "stream"`` config."""
    return StreamSettings(
        dataset=config["data.name"],
        clients=config["chfl.clients"],
        common_ratio=config["chfl.common_ratio"],
        split_index=config["chfl.split_index"],
        hidden=number_list(config["chfl.hidden"], int),
        batch=config["chfl.stream_batch"],
        sync_every=config["chfl.stream_sync_every"],
        lr=config["chfl.stream_lr"],
        mu=config["chfl.stream_mu"],
        prox_mu=config["chfl.prox_mu"],
        late_join=config["chfl.stream_late_join"],
        eval_every=config["chfl.stream_eval_every"],
        max_rows=config["chfl.max_rows"],
    )


def _train(config: dict, out: Path | None, progress, resume: bool) -> dict:
    with named_by_config():  # errors name chfl.* keys, not settings fields
        if config["chfl.mode"] == "stream":
            return run_stream(stream_settings(config), config["data.root"], method=config["chfl.method"],
                              seed=config["seed"], run_dir=out, resume=resume)
        return run_chfl(chfl_settings(config), config["data.root"], method=config["chfl.method"],
                        seed=config["seed"], progress=progress, run_dir=out, resume=resume)


def simulate(config: dict, out: Path | None = None, progress: Progress | None = None,
             resume: bool = False) -> dict:
    """Run ``config``; with ``out``: config.yaml, metrics.csv (rows as produced), checkpoint.pt
    (every FedAvg round; deleted once summary.json is written); ``resume``: continue from it."""
    return run_batch(config, out, _train, progress, resume, checkpoint_name=CHECKPOINT,
                     discard_checkpoint=True)


def summary_rows(s: dict) -> tuple[str, list[tuple[str, str]]]:
    c = s["config"]
    if "prequential_acc" in s:
        rows = [("method", f"{c['chfl.method']} (stream)"),
                ("prequential accuracy", f"{s['prequential_acc']:.4f}")]
    else:
        rows = [("method", c["chfl.method"]), ("test accuracy (mean over clients)", f"{s['test_acc']:.4f}")]
    return f"fedstream {s['task']} on {c['data.name']}", rows + common_rows(s)


def length(s: dict | None, c: dict, curve: list[dict]) -> str:
    if s is not None and s.get("diverged_at") is not None:
        return "diverged"
    return "done" if s else "running"


TASK = Task(
    name="chfl",
    doc="continual horizontal FL",
    simulate=simulate,
    run_many=one_after_another(simulate),
    checkpoint_name=CHECKPOINT,
    refuse_fresh=("summary.json", CHECKPOINT),
    resume_needs_checkpoint=True,
    title=batch_title,
    summary_rows=summary_rows,
    columns=("test_acc", "prequential_acc", "total_mb", "up_mb", "down_mb", "wall_seconds"),
    index_fields=lambda r: {},
    length=length,
    finished=lambda summary, config: True,
    cost=lambda c: 1e5 * c["chfl.rounds"] * c["chfl.clients"],  # a CHFL round ~10^5 online rounds
    units=lambda c: 1,
    tuning=lambda c, rounds: {},
    fields=chfl_config.FIELDS,
    datasets=chfl_config.DATASETS,
    check=chfl_config.check,
    stack_key=lambda c: None,
)
