"""Batch (offline) VFL over epochs, with the paper's compression on the links (issue 7, section 4).

:func:`run_batch_vfl` is the public entry. Per epoch: the training rows in a fresh random order
(seeded by (seed, epoch)), mini-batches played by :func:`~fedstream.vfl.protocol.train_step`
over the transport, then the test accuracy. Bytes are the transport ledger's, per direction and
per epoch. Evaluation sends the test embeddings through the training links, compressed as in
training (same codec, the ranking state at the end of the epoch), with the test samples' own rows
in the server's per-sample embedding cache (ids n_train + j): a test sample's unsent entries take
the values sent for it at the previous evaluation, as a training sample's take those of the
previous epoch; evaluation never reads or writes a training row and sends nothing down. Its
uplink bytes go to a separate ledger and are reported apart (``eval_bytes_up``).

With ``out`` the run checkpoints at the end of every epoch (:mod:`fedstream.vfl.checkpoint`);
``resume=True`` continues from that checkpoint when there is one.

The epoch loop (:func:`play_epochs`) needs only the labels, the server party and a
:class:`~fedstream.vfl.protocol.Cohort` of clients: :func:`run_batch_vfl` gives it the
clients in this process (:class:`~fedstream.vfl.protocol.LocalCohort`), ``fedstream
deploy`` client parties on their own nodes (:mod:`fedstream.vfl.deploy.driver`).

Participant selection (``selection.*``, :mod:`fedstream.vfl.selection`): each epoch trains
on the rows the dynamic setting makes available, with the selected clients only: the others send
nothing up (in training and evaluation) and receive no gradient, and the server pads their
embeddings. Selection runs before the first epoch and again when the schedule says so; each
(re)selection is a metrics.csv row's ``reselected``, ``selection_seconds``, ``selected_<m>``,
``score_<m>`` and a ``selection.events`` entry of summary.json. VF-PS's distance traffic is
reported apart (``distance_bytes``), not in the transport's bytes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

import fedstream.vfl.checkpoint as checkpoint
from fedstream.data import resolve_data_root
from fedstream.errors import ConfigError, DivergedError
from fedstream.metrics.collapse import top_share
from fedstream.runs.checkpoint import CheckpointError
from fedstream.runs.device import resolve_device
from fedstream.runs.threads import one_torch_thread
from fedstream.selection.padding import make_padding
from fedstream.transport import make_transport
from fedstream.transport.ledger import ByteLedger
from fedstream.vfl.data import VerticalImages, load_vertical
from fedstream.vfl.models import build_models, build_models_alone, party_seed
from fedstream.vfl.parties import BatchClient, BatchServer
from fedstream.vfl.protocol import (
    Batch,
    Cohort,
    LocalCohort,
    play_scores,
    play_train_step,
)
from fedstream.vfl.results import MetricsWriter, make_summary
from fedstream.vfl.selection import EpochPlan, Participation
from fedstream.vfl.settings import BatchVFLSettings
from fedstream.vfl.table_data import VerticalTable

PROGRESS_EVERY = 50  # steps between "step" progress events


def run_batch_vfl(settings: BatchVFLSettings, data_root: str | os.PathLike | None, *, seed: int,
                  progress: Callable[[dict], None] | None = None, out: str | os.PathLike | None = None,
                  resume: bool = False) -> dict:
    """Train batch VFL as ``settings`` says on the data under ``data_root``; return the summary.

    ``data_root`` None resolves as ``data.root`` does (``$FEDSTREAM_DATA``, ``./data``, ``../shared/data``).

    ``progress`` receives ``{"event": "step", "epoch", "step", "steps", "loss"}`` every
    :data:`PROGRESS_EVERY` steps and at the last step of an epoch, and ``{"event": "epoch", **row}``
    after each epoch. With ``out``, ``metrics.csv`` gets one row per epoch (:data:`COLUMNS`) as it
    is produced, ``checkpoint.pt`` the run's state after every epoch and ``summary.json`` the
    returned summary. ``resume`` (needs ``out``): continue from ``out/checkpoint.pt`` if it exists
    (same settings; ``epochs`` may be raised), else start afresh. Torch runs single-threaded.

    Example (MNIST, the paper's setting, top-k up and quantised Huffman-coded gradients down)::

        from fedstream.transport import CompressionSpec
        settings = BatchVFLSettings(epochs=3, compression=CompressionSpec(up="topk", down="quant-huffman"))
        summary = run_batch_vfl(settings, "../shared/data", seed=0, out="runs/vfl-topk-quant")
        summary["final_accuracy"], summary["bytes"]["up"], summary["bytes"]["down"]
    """
    if not isinstance(settings, BatchVFLSettings):
        raise ConfigError(f"settings: expected BatchVFLSettings, got {type(settings).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed = {seed!r}: expected an integer >= 0")
    if resume and out is None:
        raise ConfigError("resume = True needs out (the folder holding checkpoint.pt)")
    with one_torch_thread():
        return _run(settings.resolved(), resolve_data_root(data_root), seed, progress,
                    None if out is None else Path(out), resume).summary


class Trained(NamedTuple):
    """A finished run's summary and its parties (what an estimator keeps to predict with)."""

    summary: dict
    clients: list[BatchClient]
    server: BatchServer
    transport: object


def train_on(settings: BatchVFLSettings, data: VerticalImages | VerticalTable, *, seed: int,
             until: Callable[[list[dict], list[BatchClient], BatchServer], bool] | None = None) -> Trained:
    """:func:`run_batch_vfl`'s training on rows already in memory (``data``), in this process.
    ``until(rows, clients, server)``, after each epoch: True stops before ``settings.epochs``
    (an estimator's early stopping; it may keep a copy of the parties' weights)."""
    with one_torch_thread():
        return _run(settings.resolved(), Path("."), seed, None, None, False, data, until)


def nonfinite_parties(clients: list[BatchClient], server: BatchServer) -> list[str]:
    """The parties ("server", "client m") whose parameters hold NaN or inf."""
    parties = {"server": server.model} | {f"client {m}": c.model for m, c in enumerate(clients)}
    return [name for name, model in parties.items()
            if not all(bool(torch.isfinite(p).all()) for p in model.parameters())]


def _run(settings: BatchVFLSettings, root: Path, seed: int, progress, out: Path | None, resume: bool,
         data: VerticalImages | VerticalTable | None = None, until=None) -> Trained:
    """A run; what its models draw while training (dropout, say, in a model of ``model.client`` /
    ``model.server``) comes from the global torch RNG seeded from ``seed`` here (the caller's RNG is
    put back after), and a checkpoint carries that RNG's state, so runs and resumed runs repeat."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(party_seed(seed, -1 % 2**32))
        return _run_seeded(settings, root, seed, progress, out, resume, data, until)


def _run_seeded(settings: BatchVFLSettings, root: Path, seed: int, progress, out: Path | None, resume: bool,
                data: VerticalImages | VerticalTable | None, until) -> Trained:
    tic = time.perf_counter()
    data = load_vertical(settings, root) if data is None else data
    clients, server = build_parties(settings, data, seed)
    transport = make_transport(settings.clients, settings.compression)
    spec = settings.selection
    part = (
        Participation(spec, data.client_features(data.train_x), data.train_y, seed=seed)
        if spec.active
        else None
    )
    config = settings.to_config() | {"seed": seed}
    rows: list[dict] = []
    step = done = 0
    if resume and (out / checkpoint.NAME).exists():
        state = checkpoint.load(out / checkpoint.NAME, config=config, clients=clients, server=server,
                                transport=transport, part=part)
        if bad := nonfinite_parties(clients, server):
            raise CheckpointError(out / checkpoint.NAME, f"checkpoint refused: the model of {', '.join(bad)} "
                                  "holds NaN or inf (the run had diverged); start again with a smaller "
                                  "optimizer.lr")
        rows, step, done = state.rows, state.step, state.epoch
        tic -= state.seconds
        if part is not None:  # a checkpoint from before the selection's state was stored: replay the
            for epoch in range(part.last_epoch + 1, done + 1):  # plans (they depend on data and seed only)
                part.plan(epoch)
    writer = MetricsWriter(out, selection_columns(settings.clients) if part is not None else [], rows)

    def save(epoch: int, step: int, rows: list[dict]) -> None:
        if bad := nonfinite_parties(clients, server):  # a NaN model may send finite messages
            raise DivergedError(f"training diverged in epoch {epoch}: the model of {', '.join(bad)} holds "
                                f"NaN or inf (optimizer.lr = {config.get('optimizer.lr')}; try a smaller "
                                "one)", 0)
        if out is not None:
            record = checkpoint.RunState(epoch, step, rows, time.perf_counter() - tic)
            checkpoint.save(out, config=config, state=record, clients=clients, server=server,
                            transport=transport, part=part)

    cohort = LocalCohort(clients, transport, data_inputs(data))
    rows = play_epochs(settings, data, cohort, server, seed, progress, part=part, writer=writer, tic=tic,
                       rows=rows, step=step, done=done, after_epoch=save,
                       until=None if until is None else lambda rows: until(rows, clients, server))
    summary = run_summary(settings, seed, rows, transport.ledger.summary(), time.perf_counter() - tic, part)
    if isinstance(data, VerticalTable):
        summary |= data.summary_fields()
    writer.summary(summary)
    return Trained(summary, clients, server, transport)


def data_inputs(data: VerticalImages) -> Callable[[Batch], list[torch.Tensor]]:
    """Every client's input tensor of a batch, cut from the images ``data`` holds (the simulator's view)."""
    return lambda b: data.split_inputs(b.split, b.rows)


def play_epochs(
    settings: BatchVFLSettings,
    labels,
    cohort: Cohort,
    server: BatchServer,
    seed: int,
    progress,
    *,
    part: Participation | None,
    writer: MetricsWriter,
    tic: float,
    rows: list[dict] | None = None,
    step: int = 0,
    done: int = 0,
    after_epoch: Callable[[int, int, list[dict]], None] | None = None,
    until: Callable[[list[dict]], bool] | None = None,
) -> list[dict]:
    """Epochs ``done + 1 .. settings.epochs``: train, evaluate, one metrics row each; return all rows.

    ``labels`` holds ``train_y`` and ``test_y`` (the server's data: :class:`VerticalImages` or
    labels alone); ``cohort`` the clients; ``part`` the participant selection (None: every client,
    every row); ``step`` the steps done; ``after_epoch(epoch, steps done, rows)`` runs after each
    epoch's row is written (the simulator's checkpoint); ``until(rows)``, after that, True stops the
    loop early (an estimator's early stopping)."""
    rows = list(rows or [])
    for epoch in range(done + 1, settings.epochs + 1):
        start, before = time.perf_counter(), cohort.ledger.summary()
        plan = part.plan(epoch) if part is not None else None
        selected = None if plan is None else plan.clients
        loss, steps, train_acc = play_epoch(epoch, settings, labels.train_y, cohort, server, seed, progress,
                                            rows=None if plan is None else plan.rows, selected=selected,
                                            first_step=step)
        step += steps
        accuracy, test_loss, eval_bytes, top, label_top = evaluate_on(
            settings, len(labels.train_y), labels.test_y, cohort, server, selected
        )
        after = cohort.ledger.summary()
        rows.append({"epoch": epoch, "steps": steps, "train_loss": loss, "test_accuracy": accuracy,
                     "bytes_up": after["up"] - before["up"], "bytes_down": after["down"] - before["down"],
                     "bytes_total": after["total"], "eval_bytes_up": eval_bytes,
                     "epoch_seconds": time.perf_counter() - start, "wall_seconds": time.perf_counter() - tic,
                     "train_accuracy": train_acc, "test_loss": test_loss, "top_class_share": top,
                     "label_top_class_share": label_top}
                    | ({} if plan is None else selection_row(plan, settings.clients, len(labels.train_y))))
        writer.append(rows[-1])
        if after_epoch is not None:
            after_epoch(epoch, step, rows)
        if progress is not None:
            progress({"event": "epoch", **rows[-1]})
        if until is not None and until(rows):
            break
    return rows


def run_summary(settings: BatchVFLSettings, seed: int, rows: list[dict], ledger: dict, wall: float,
                part: Participation | None) -> dict:
    """:func:`make_summary`, plus the selection's record when the run selects."""
    summary = make_summary(settings, seed, rows, ledger, wall)
    if part is not None:
        summary |= {"selection": part.summary(), "selection_seconds": part.summary()["seconds"],
                    "selection_distance_bytes": part.summary()["distance_bytes"]}
    return summary


def selection_columns(m: int) -> list[str]:
    """The metrics.csv columns a run with participant selection adds (numbers only)."""
    return (["available_rows", "reselected", "selection_seconds", "distance_bytes"]
            + [f"selected_{j}" for j in range(m)] + [f"score_{j}" for j in range(m)])


def selection_row(plan: EpochPlan, m: int, n: int) -> dict:
    """An epoch's selection columns: rows available, whether (and how long) selection ran, who sent,
    scores."""
    event = plan.event or {}
    scores = event.get("scores") or [""] * m
    return (
        {
            "available_rows": n if plan.rows is None else int(plan.rows.size),
            "reselected": int(bool(event)),
            "selection_seconds": event.get("seconds", 0.0),
            "distance_bytes": event.get("distance_bytes", 0),
        }
        | {f"selected_{j}": int(j in plan.clients) for j in range(m)}
        | {f"score_{j}": scores[j] for j in range(m)}
    )


def build_parties(
    settings: BatchVFLSettings, data: VerticalImages, seed: int
) -> tuple[list[BatchClient], BatchServer]:
    """Clients and server with models initialised from ``seed`` (the global torch RNG is left as it was).
    With participant selection the server gets the padding of ``selection.padding``. A table with
    one file per party: each party's model from its own seed, and a client whose strip shape is
    None (a deployed node's view of the others) is None."""
    sizes = dict(embedding=settings.embedding, hidden=settings.hidden, resnet_width=settings.resnet_width,
                 n_classes=data.n_classes, server_hidden=settings.server_hidden,
                 client_model=settings.client_model, server_model=settings.server_model)
    if settings.own_draws:
        client_models, server_model = build_models_alone(settings.dataset, data.strip_shapes(), seed=seed,
                                                         **sizes)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            client_models, server_model = build_models(settings.dataset, data.strip_shapes(), **sizes)
    device = resolve_device(settings.device)
    clients = [None if model is None else BatchClient(m, model, settings.lr, device, settings.optimizer)
               for m, model in enumerate(client_models)]
    spec = settings.selection
    padding = None
    if spec.active:
        kwargs = {"alpha": spec.ema_alpha} if spec.padding == "ema" else {}
        padding = make_padding(spec.padding, settings.clients, settings.embedding, **kwargs)
    return clients, BatchServer(
        server_model, settings.clients, settings.embedding, settings.lr, padding=padding, device=device,
        optimizer=settings.optimizer,
    )


def batches(n: int, size: int, order: np.ndarray | None = None):
    """Index arrays of consecutive mini-batches over ``order`` (default 0..n-1); the last may be smaller."""
    idx = np.arange(n) if order is None else order
    for start in range(0, len(idx), size):
        yield idx[start:start + size]


def train_epoch(epoch: int, settings: BatchVFLSettings, data: VerticalImages, clients, server, transport,
                seed: int, progress, *, rows: np.ndarray | None = None, selected=None,
                first_step: int | None = None) -> tuple[float, int, float]:
    """One pass over the training rows (``rows``: the available ones; None: all) in a (seed, epoch)-seeded
    order, with the ``selected`` clients (None: all); (mean loss, steps, training accuracy).

    Steps are numbered from ``first_step`` (default: (epoch - 1) x steps per epoch)."""
    return play_epoch(
        epoch,
        settings,
        data.train_y,
        LocalCohort(clients, transport, data_inputs(data)),
        server,
        seed,
        progress,
        rows=rows,
        selected=selected,
        first_step=first_step,
    )


def play_epoch(epoch: int, settings: BatchVFLSettings, train_y: np.ndarray, cohort: Cohort, server, seed: int,
               progress, *, rows: np.ndarray | None = None, selected=None,
               first_step: int | None = None) -> tuple[float, int, float]:
    """:func:`train_epoch` over any :class:`~fedstream.vfl.protocol.Cohort`; the server needs
    only the training labels ``train_y``."""
    n = len(train_y) if rows is None else len(rows)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n) if rows is None else rows[rng.permutation(n)]
    steps_per_epoch = -(-n // settings.batch_size)
    if steps_per_epoch == 0:
        return float("nan"), 0, float("nan")
    first = (epoch - 1) * steps_per_epoch if first_step is None else first_step
    total, correct = 0.0, 0
    for j, idx in enumerate(batches(n, settings.batch_size, order)):
        labels = torch.from_numpy(train_y[idx])
        total += play_train_step(Batch(first + j, "train", idx, idx), labels, cohort, server, selected)
        correct += server.last_correct
        if progress is not None and ((j + 1) % PROGRESS_EVERY == 0 or j + 1 == steps_per_epoch):
            progress(
                {
                    "event": "step",
                    "epoch": epoch,
                    "step": j + 1,
                    "steps": steps_per_epoch,
                    "loss": total / (j + 1),
                }
            )
    return total / steps_per_epoch, steps_per_epoch, correct / n


class Evaluation(NamedTuple):
    """A test pass: accuracy, mean cross-entropy, the uplink bytes it took, and the share of the
    predictions that went to the most-predicted class and of the labels to the most frequent one
    (:mod:`fedstream.metrics.collapse`)."""

    accuracy: float
    loss: float
    eval_bytes: int
    top_class_share: float
    label_top_class_share: float


def evaluate(settings: BatchVFLSettings, data: VerticalImages, clients, server, link,
             selected=None) -> Evaluation:
    """Test accuracy, mean test cross-entropy and the uplink bytes it took, through ``link`` (the training
    transport; its ledger is set aside meanwhile), with the ``selected`` clients sending and the server
    padding the others. Test sample j is id ``n_train + j`` for the links' per-sample caches."""
    return evaluate_on(
        settings,
        len(data.train_y),
        data.test_y,
        LocalCohort(clients, link, data_inputs(data)),
        server,
        selected,
    )


def evaluate_on(settings: BatchVFLSettings, n_train: int, test_y: np.ndarray, cohort: Cohort, server,
                selected=None) -> Evaluation:
    """:func:`evaluate` over any :class:`~fedstream.vfl.protocol.Cohort` (its ledger is set
    aside meanwhile); the server needs only the test labels and the number of training rows."""
    correct, loss, predicted = 0, 0.0, []
    plan = [
        Batch(j, "test", idx, n_train + idx)
        for j, idx in enumerate(batches(len(test_y), settings.batch_size))
    ]
    with separate_ledger(cohort) as ledger:
        for batch, logits in zip(plan, play_scores(plan, cohort, server, selected)):
            labels = torch.from_numpy(test_y[batch.rows])
            guess = logits.argmax(dim=1)
            predicted.append(guess.numpy())
            correct += int((guess == labels).sum())
            loss += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
    return Evaluation(correct / len(test_y), loss / len(test_y), ledger.summary()["up"],
                      top_share(np.concatenate(predicted)) if predicted else float("nan"), top_share(test_y))


@contextmanager
def separate_ledger(transport):
    """Count ``transport``'s bytes in a fresh ledger (yielded) for the duration, then restore its own."""
    own = transport.ledger
    transport.ledger = fresh = ByteLedger(len(own.up))
    try:
        yield fresh
    finally:
        transport.ledger = own


def train_config(
    config: dict, out: Path | None, progress: Callable[[dict], None] | None, resume: bool
) -> dict:
    """Train a resolved ``task = "vfl"`` config (``fedstream run``, sweeps, experiments): metrics.csv
    and checkpoint.pt every epoch in ``out``."""
    return run_batch_vfl(BatchVFLSettings.from_config(config), config["data.root"], seed=config["seed"],
                         progress=progress, out=out, resume=resume)
