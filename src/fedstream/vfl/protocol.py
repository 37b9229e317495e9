"""One step of batch VFL, written against parties and a transport only (the paper's Algorithm 1).

Training step t: every selected client sends its embedding of the batch (up, lines 2-6); the
server fills in the others (padding), concatenates, learns and sends each sender dL/dE (down,
lines 10-17); each sender learns from what it received (lines 7-8). Evaluation: the selected
clients' embeddings up, the server predicts; nothing down. Whatever the transport does to the
values (sparsify, cache-fill, quantise) is what parties see. Unselected clients send nothing.

``samples`` are the dataset ids of the batch's rows. The server chose the batch, so its end of
each link knows them without their travelling; they key its per-sample embedding cache.

The server's step loop (:func:`play_train_step`, :func:`play_scores`, used by
:mod:`fedstream.vfl.trainer`) talks to the clients through a :class:`Cohort`: the clients
and the transport in this process (:class:`LocalCohort`), or client parties on their own nodes
behind a link (``fedstream.vfl.deploy.proxy.RemoteCohort``, ``fedstream deploy``). The
parties never know which. :func:`train_step` and :func:`score_step` are the same steps over a
:class:`LocalCohort` whose inputs are given.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from fedstream.transport.ledger import ByteLedger
from fedstream.transport.messages import Embedding, Gradient
from fedstream.vfl.parties import BatchClient, BatchServer


@dataclass(frozen=True)
class Batch:
    """One mini-batch as the server names it: step ``step``, rows ``rows`` of the ``split``
    (``"train"`` or ``"test"``), and ``samples``, the rows' ids for the links' per-sample caches
    (train: the rows; test: n_train + rows; None: the transport derives none)."""

    step: int
    split: str
    rows: np.ndarray
    samples: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)


class Cohort(Protocol):
    """The clients of a run as the server's step loop sees them, whatever carries the messages.

    Every embedding is returned as the server's end of the link decoded it (lossy when the uplink
    compresses) and every gradient goes through the downlink codec; ``ledger`` counts the encoded
    bytes of both (the trainer may swap it for a fresh one while it evaluates).
    """

    ledger: ByteLedger

    def embeddings(self, batch: Batch, selected: Collection[int] | None) -> list[Embedding | None]:
        """Training forward pass: each selected client's embedding of ``batch`` (None for the others)."""
        ...

    def gradients(self, gradients: Sequence[Gradient]) -> None:
        """Send each client that sent its dL/dE of the last training batch; it learns from it
        before it embeds anything else."""
        ...

    def inferences(
        self, batches: Sequence[Batch], selected: Collection[int] | None
    ) -> Iterator[list[Embedding | None]]:
        """Evaluation forward passes: per batch, in order, each selected client's embedding."""
        ...


class LocalCohort:
    """The clients and the transport in this process; ``inputs(batch)`` gives every client's
    input tensor of a batch (the simulator cuts the images it holds)."""

    def __init__(self, clients: list[BatchClient], transport, inputs: Callable[[Batch], list[torch.Tensor]]):
        self.clients, self.transport, self.inputs = clients, transport, inputs

    @property
    def ledger(self) -> ByteLedger:
        return self.transport.ledger

    @ledger.setter
    def ledger(self, value: ByteLedger) -> None:
        self.transport.ledger = value

    def embeddings(self, batch: Batch, selected: Collection[int] | None) -> list[Embedding | None]:
        return _send(
            batch.step, self.inputs(batch), self.clients, self.transport, selected, True, batch.samples
        )

    def gradients(self, gradients: Sequence[Gradient]) -> None:
        for grad in gradients:
            grad = self.transport.down(grad)
            self.clients[grad.client].on_gradient(grad)

    def inferences(
        self, batches: Sequence[Batch], selected: Collection[int] | None
    ) -> Iterator[list[Embedding | None]]:
        for batch in batches:
            yield _send(
                batch.step, self.inputs(batch), self.clients, self.transport, selected, False, batch.samples
            )


def _send(step: int, inputs: list[torch.Tensor], clients: list[BatchClient], transport, selected, train: bool,
          samples: np.ndarray | None) -> list:
    out = []
    for client, x in zip(clients, inputs):
        if selected is not None and client.index not in selected:
            out.append(None)
        else:
            msg = client.embed(step, x) if train else client.infer(step, x)
            out.append(transport.up(msg) if samples is None else transport.up(msg, samples=samples))
    return out


def play_train_step(batch: Batch, labels: torch.Tensor, cohort: Cohort, server: BatchServer,
                    selected: Collection[int] | None = None) -> float:
    """One mini-batch of training with the ``selected`` clients (None: all); returns the server's loss."""
    received = cohort.embeddings(batch, selected)
    loss, gradients = server.train_step(batch.step, received, labels)
    cohort.gradients(gradients)
    return loss


def play_scores(batches: Sequence[Batch], cohort: Cohort, server: BatchServer,
                selected: Collection[int] | None = None) -> Iterator[torch.Tensor]:
    """Class scores of each evaluation batch, in order."""
    for batch, received in zip(batches, cohort.inferences(batches, selected)):
        yield server.logits(batch.step, received, len(batch))


def _given(step: int, inputs: list[torch.Tensor], clients: list[BatchClient], transport,
           samples: np.ndarray | None, split: str) -> tuple[Batch, LocalCohort]:
    batch = Batch(step, split, np.arange(len(inputs[0])), samples)
    return batch, LocalCohort(clients, transport, lambda _: inputs)


def train_step(step: int, inputs: list[torch.Tensor], labels: torch.Tensor, clients: list[BatchClient],
               server: BatchServer, transport, selected: Collection[int] | None = None,
               samples: np.ndarray | None = None) -> float:
    """One mini-batch of training with the ``selected`` clients (None: all); returns the server's loss."""
    batch, cohort = _given(step, inputs, clients, transport, samples, "train")
    return play_train_step(batch, labels, cohort, server, selected)


def score_step(
    step: int,
    inputs: list[torch.Tensor],
    clients: list[BatchClient],
    server: BatchServer,
    transport,
    selected: Collection[int] | None = None,
    samples: np.ndarray | None = None,
) -> torch.Tensor:
    """Class scores of one evaluation batch."""
    batch, cohort = _given(step, inputs, clients, transport, samples, "test")
    return next(play_scores([batch], cohort, server, selected))


def predict_step(
    step: int,
    inputs: list[torch.Tensor],
    clients: list[BatchClient],
    server: BatchServer,
    transport,
    selected: Collection[int] | None = None,
    samples: np.ndarray | None = None,
) -> np.ndarray:
    """Predicted classes of one evaluation batch."""
    return score_step(step, inputs, clients, server, transport, selected, samples).argmax(dim=1).numpy()
