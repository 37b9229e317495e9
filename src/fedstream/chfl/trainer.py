"""One CHFL experiment: a dataset, a feature split, a run seed, a method -> test accuracies.

:func:`run_chfl` loads the dataset, splits features (common/unique, ``settings.split_index``) and
rows (60/20/20, ``seed``), then for every learning rate runs one federation (Algorithm 2 for
``chfl``, Algorithm 1 for ``common``/``concat``, FedProx for ``fedprox``, no federation for
``local``) of ``rounds`` rounds. Each round the server's model goes down to every client and the
clients' models come back up as encoded :class:`ModelUpdate` bytes, counted per client and
direction. After each round every client scores its candidates on its validation rows; each
client then keeps the (learning rate, μ, round) with the best validation accuracy
(:mod:`fedstream.chfl.selection`) and reports that model's test accuracy. Given a run folder, the
run writes a metrics row per evaluation and a checkpoint after every FedAvg round, and resumes
from it (:class:`~fedstream.chfl.rounds.BatchRun`, :mod:`fedstream.chfl.checkpoint`).

The pieces, in the order a run meets them: :mod:`fedstream.chfl.plan` (the splits and the
clients' initial weights), :mod:`fedstream.chfl.rounds` (the server's side: FedAvg and the round
loop) and :mod:`fedstream.chfl.cohort` (the clients' side: :class:`~fedstream.chfl.cohort.LocalCohort`
in this process, or ``fedstream.chfl.deploy.proxy.RemoteCohort`` over a link to nodes that each
hold one client). This module holds the entry points and the result.

Result variants: ``chfl`` reports its per-client choice over all μ (``chfl``) and restricted to
μ = 0 (``mu=0``) and to μ > 0 (``mu>0``), the two CHFL columns of Table II, plus the baselines
of ``settings.shared_baselines`` scored in the same federation (``common``: identical to a
separate Common run with the same seed; ``concat``: its own head on the same common column).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from fedstream.chfl.checkpoint import RunFolder
from fedstream.chfl.cohort import (  # re-exported: imported from here before the split
    Cohort,
    LocalCohort,
    RoundResult,
    keep_common,
    score_choices,
    train_and_upload,
    validate_client,
)
from fedstream.chfl.plan import (  # re-exported as above
    Experiment,
    Plan,
    Progress,
    build_clients,
    initial_column,
    prepare,
    prepare_client,
)
from fedstream.chfl.rounds import BatchRun, boundary, checkpointed_after  # re-exported as above
from fedstream.chfl.settings import CHFLSettings, check_method
from fedstream.chfl.splits import FRACTIONS, FeatureSplit
from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.runs.threads import one_torch_thread

__all__ = [
    "METRIC_COLUMNS",
    "SUMMARY_NAMES",
    "BatchRun",
    "Cohort",
    "Experiment",
    "LocalCohort",
    "Plan",
    "Progress",
    "RoundResult",
    "boundary",
    "build_clients",
    "checkpointed_after",
    "identity",
    "initial_column",
    "keep_common",
    "prepare",
    "prepare_client",
    "result_of",
    "run_chfl",
    "run_on_table",
    "train_table",
    "score_choices",
    "train_and_upload",
    "validate_client",
    "variants_of",
]

METRIC_COLUMNS = ["lr", "round", "val_acc", "bytes_total"]
# result variant -> summary.json key test_acc_<suffix>: every run names what it measured, so that a
# report row keyed by dataset alone gathers Common from chfl runs and Local from local runs
SUMMARY_NAMES = {"chfl": "chfl", "mu=0": "mu0", "mu>0": "mupos", "common": "common", "concat": "concat",
                 "local": "local", "fedprox": "fedprox"}


def variants_of(method: str, settings: CHFLSettings) -> dict[str, Callable[[str], bool]]:
    """Result name -> which candidates its per-client choice may pick (module-level functions, so
    that a fitted :class:`~fedstream.chfl.CHFLClassifier` pickles)."""
    if method != "chfl":
        return {method: _any_candidate}
    out: dict[str, Callable[[str], bool]] = {"chfl": _mu_candidate}
    if 0.0 in settings.mus:
        out["mu=0"] = partial(_named, "mu=0")
    if any(m > 0 for m in settings.mus):
        out["mu>0"] = _positive_mu_candidate
    for b in settings.shared_baselines:
        out[b] = partial(_named, b)
    return out


def _any_candidate(c: str) -> bool:
    return True


def _mu_candidate(c: str) -> bool:
    return c.startswith("mu=")


def _positive_mu_candidate(c: str) -> bool:
    return c.startswith("mu=") and c != "mu=0"


def _named(name: str, c: str) -> bool:
    return c == name


def identity(settings: CHFLSettings, method: str, seed: int, n_rows: int, n_classes: int) -> dict:
    """What makes two runs the same run (a checkpoint of one resumes only the same)."""
    return {"task": "chfl", "settings": settings.to_dict(), "method": method, "seed": seed,
            "n_rows": n_rows, "n_classes": n_classes}


def run_on_table(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, method: str = "chfl",
                 seed: int = 0, progress: Progress | None = None, n_classes: int | None = None,
                 run_dir: str | os.PathLike[str] | None = None, resume: bool = True) -> dict:
    """:func:`run_chfl` on arrays already in memory (X float32 (n, d), y int64 0-based).

    ``n_classes`` defaults to ``y.max() + 1``. ``run_dir``: keep metrics.csv and checkpoint.pt
    there and (``resume``) continue from a checkpoint found there (:mod:`fedstream.chfl.checkpoint`).
    """
    return train_table(X, y, settings, method=method, seed=seed, progress=progress, n_classes=n_classes,
                       run_dir=run_dir, resume=resume)[0]


def train_table(X: np.ndarray, y: np.ndarray, settings: CHFLSettings, *, method: str = "chfl",
                seed: int = 0, progress: Progress | None = None, n_classes: int | None = None,
                run_dir: str | os.PathLike[str] | None = None,
                resume: bool = True, fractions: tuple[float, float, float] = FRACTIONS
                ) -> tuple[dict, Experiment, LocalCohort]:
    """:func:`run_on_table`'s result, with the experiment and the trained cohort (each client's
    validation records: :class:`fedstream.chfl.final.ChosenModels` predicts with them);
    ``fractions``: the rows' train / validation / test shares (:func:`~fedstream.chfl.plan.prepare`)."""
    t0 = time.perf_counter()
    with one_torch_thread():  # runs are parallelised across processes
        ex = prepare(X, y, settings, method=method, seed=seed, n_classes=n_classes, fractions=fractions)
        folder = None if run_dir is None else RunFolder(
            run_dir, identity(settings, method, seed, ex.n_rows, ex.n_classes), METRIC_COLUMNS, resume=resume)
        cohort = LocalCohort(ex)
        run = BatchRun(ex.plan, cohort, folder, progress)
        run.run()
        variants = run.test_choices(variants_of(method, settings))
    return result_of(run, variants, n_rows=ex.n_rows, features=ex.features) | {
        "wall_seconds": run.elapsed + time.perf_counter() - t0, "resumed": run.elapsed > 0}, ex, cohort


COLLAPSE_KEYS = ("top_class_share", "label_top_class_share", "collapsed", "warnings")


def result_of(run: BatchRun, variants: dict[str, dict], *, n_rows: int, features: FeatureSplit) -> dict:
    """The result dict of a finished run (timings aside), simulated or deployed alike."""
    plan, settings = run.plan, run.plan.settings
    main = variants[next(iter(variants))]
    return {
        "task": "chfl", "method": plan.method, "seed": plan.seed, "settings": settings.to_dict(),
        "test_acc": main["test_acc"], "test_acc_per_client": main["test_acc_per_client"],
        **{f"test_acc_{SUMMARY_NAMES[v]}": r["test_acc"] for v, r in variants.items() if v in SUMMARY_NAMES},
        "variants": variants, "n_rows": n_rows, "n_classes": plan.n_classes,
        "features": {"common": features.common.tolist(), "unique": [u.tolist() for u in features.unique]},
        "bytes": run.ledger.summary(), "federations": len(settings.lrs) if plan.federated else 0,
        **{k: main[k] for k in COLLAPSE_KEYS if k in main},  # the main variant's (fedstream.metrics.collapse)
    }


def run_chfl(settings: CHFLSettings, data_root: str | os.PathLike[str] | None, *, method: str = "chfl",
             seed: int = 0, progress: Progress | None = None,
             run_dir: str | os.PathLike[str] | None = None, resume: bool = True) -> dict:
    """Run one experiment of ``method`` (chfl, common, local, concat, fedprox) and return its results.

    ``data_root``: resolved as in :func:`fedstream.data.resolve_data_root`. The result holds the
    mean and per-client test accuracy of the validation-chosen models (``test_acc``,
    ``test_acc_per_client``, ``variants``; a chfl run also ``test_acc_mu0``, ``test_acc_mupos``
    and its shared baselines' ``test_acc_common`` / ``test_acc_concat``), the bytes sent up and
    down (``bytes``), the feature split, the data file read and whether it is partial (``data``),
    and ``wall_seconds``. ``run_dir``: checkpoint after every round there and (``resume``) continue
    from a checkpoint found there.
    """
    check_method(method)
    t0 = time.perf_counter()
    loaded = load_chfl_dataset(settings.dataset, resolve_data_root(data_root))
    load_seconds = time.perf_counter() - t0
    out = run_on_table(loaded.table.X, loaded.table.y, settings, method=method, seed=seed,
                       progress=progress, n_classes=SPECS[settings.dataset].n_classes, run_dir=run_dir,
                       resume=resume)
    out["data"] = {"name": settings.dataset, "path": str(Path(loaded.path)), "status": loaded.status}
    out["wall_seconds"] += load_seconds
    return out
