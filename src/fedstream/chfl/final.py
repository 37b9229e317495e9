"""The final model of a finished batch CHFL run: each client's validation-chosen model.

A CHFL run does not end with one model: each client keeps the (learning rate, candidate, round)
with the best validation accuracy and reports that model's test accuracy
(:mod:`fedstream.chfl.selection`). A finished run keeps what it took to score them, its last
checkpoint (the validation records with their snapshots and the global common columns they point
to), as ``model.pt`` in the run folder (:data:`FINAL`). :class:`FinalModel` rebuilds the run's
experiment from its config (the same data, splits and per-client statistics, all seeded), puts the
records back and restores a client's choice, which then predicts new rows through its own columns,
standardised by its own training rows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from fedstream.chfl.checkpoint import check_identity, read_checkpoint
from fedstream.chfl.cohort import LocalCohort
from fedstream.chfl.plan import Experiment, prepare
from fedstream.chfl.runner import chfl_settings
from fedstream.chfl.table_data import ALL_ROWS, client_files_experiment, encode_client_rows
from fedstream.chfl.trainer import identity, variants_of
from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.data.table import Table
from fedstream.data.table_source import TableSource, TableSpec, table_paths
from fedstream.errors import ConfigError, DataError

FINAL = "model.pt"
"""A finished CHFL run's final checkpoint: the clients' validation records (what predicts)."""

Encode = Callable[[object, int], np.ndarray]
"""(raw rows, client) -> the rows in the run's feature space (n, d), before the client's scaling."""


def experiment_of(config: dict) -> tuple[Experiment, Encode]:
    """The experiment of a ``task = "chfl"`` batch config, as its run built it, and its encoder of
    new raw rows: a table's file columns by name (:class:`~fedstream.data.table.Table`) or a data
    set's raw rows (n, d)."""
    settings, method, seed = chfl_settings(config), config["chfl.method"], config["seed"]
    if config["data.name"] == "table" and len(table_paths(config["data.path"])) > 1:
        ex, names, _, cats = client_files_experiment(settings, config, method=method, seed=seed)

        def own_columns(raw, k: int) -> np.ndarray:
            if not isinstance(raw, Table):
                raise DataError("expected rows of a table file with the client's columns by name")
            return encode_client_rows(raw, names, cats)

        return ex, own_columns
    if config["data.name"] == "table":
        spec = TableSpec(config["data.path"], config["data.label"], config["data.id"],
                         config["data.categorical"], None, n_clients=1, stats_rows=ALL_ROWS)
        source = TableSource(spec)
        rows = np.arange(source.n_base)
        ex = prepare(source.features(rows), source.labels(rows), settings, method=method, seed=seed,
                     n_classes=source.n_classes)
        return ex, lambda raw, k: source.standardise(raw)
    loaded = load_chfl_dataset(settings.dataset, resolve_data_root(config["data.root"]))
    X, y = loaded.table.X, loaded.table.y
    ex = prepare(X, y, settings, method=method, seed=seed, n_classes=SPECS[settings.dataset].n_classes)

    def raw_rows(raw, k: int) -> np.ndarray:
        if not isinstance(raw, np.ndarray) or raw.ndim != 2 or raw.shape[1] != X.shape[1]:
            raise DataError(f"expected raw rows, an array (n, {X.shape[1]}) of {settings.dataset}'s "
                            f"columns in file order, found {getattr(raw, 'shape', type(raw).__name__)}")
        return raw.astype(X.dtype)

    return ex, raw_rows


class ChosenModels:
    """Each client's chosen model of a trained ``cohort`` (its validation records) over experiment
    ``ex``; ``encode(raw, k)``: new raw rows in the run's feature space (:data:`Encode`)."""

    def __init__(self, ex: Experiment, cohort: LocalCohort, encode: Encode):
        self.ex, self.cohort, self._encode = ex, cohort, encode
        self.variant, self.allowed = next(iter(variants_of(ex.method, ex.settings).items()))

    @property
    def n_clients(self) -> int:
        return self.ex.settings.clients

    def choice(self, k: int):
        """Client ``k``'s choice (:class:`~fedstream.chfl.selection.Choice`) of the run's main variant."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k < self.n_clients:
            raise ConfigError(f"client {k!r}: expected a client index 0..{self.n_clients - 1}")
        return self.cohort.selector.choose(int(k), self.allowed)

    def predict_proba(self, raw, k: int) -> np.ndarray:
        """float64 (n, classes): client ``k``'s chosen model on new raw rows (its own columns)."""
        ch = self.choice(k)
        self.cohort.start(ch.lr)  # fresh clients, then client k's choice restored into its own
        client = self.cohort.clients[k]
        snapshot = self.cohort.selector.snapshots[(k, ch.lr, ch.candidate)]
        client.restore(ch.candidate, snapshot, self.cohort.commons.get((ch.lr, ch.round)))
        X = self._encode(raw, k)  # in the dtype the run's rows had: the client's scaling is the run's
        xc, xu = self.ex.data[k].encode(X)
        if torch.isnan(xc).any() or torch.isnan(xu).any():
            raise DataError(f"the rows lack a column of client {k}, or hold NaN in one")
        logits = client.predict(xc, xu, [ch.candidate])[ch.candidate]
        return torch.softmax(logits, dim=1).double().cpu().numpy()


class FinalModel(ChosenModels):
    """The finished run in ``run_dir`` (its resolved ``config``): each client's chosen model, from
    the run's ``model.pt``."""

    def __init__(self, run_dir: str | Path, config: dict):
        path = Path(run_dir) / FINAL
        if not path.exists():
            raise ConfigError(f"{path} does not exist: a CHFL run keeps its final model there when it "
                              "finishes (runs of an older fedstream, and deployed runs, do not)")
        ex, encode = experiment_of(config)
        saved = read_checkpoint(path)
        check_identity(path, saved["identity"], identity(ex.settings, ex.method, ex.seed, ex.n_rows,
                                                          ex.n_classes))
        cohort = LocalCohort(ex)
        cohort.load_checkpoint(saved["state"])
        super().__init__(ex, cohort, encode)
