"""One step of batch VFL, written against parties and a transport only (the paper's Algorithm 1).

Training step t: every selected client sends its embedding of the batch (up, lines 2-6); the
server fills in the others (padding), concatenates, learns and sends each sender dL/dE (down,
lines 10-17); each sender learns from what it received (lines 7-8). Evaluation: the selected
clients' embeddings up, the server predicts; nothing down. Whatever the transport does to the
values (sparsify, cache-fill, quantise) is what parties see. Unselected clients send nothing.

``samples`` are the dataset ids of the batch's rows. The server chose the batch, so its end of
each link knows them without their travelling; they key its per-sample embedding cache.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import torch

from fedstream.vfl.batch.parties import BatchClient, BatchServer


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


def train_step(step: int, inputs: list[torch.Tensor], labels: torch.Tensor, clients: list[BatchClient],
               server: BatchServer, transport, selected: Collection[int] | None = None,
               samples: np.ndarray | None = None) -> float:
    """One mini-batch of training with the ``selected`` clients (None: all); returns the server's loss."""
    received = _send(step, inputs, clients, transport, selected, True, samples)
    loss, gradients = server.train_step(step, received, labels)
    for grad in gradients:
        grad = transport.down(grad)
        clients[grad.client].on_gradient(grad)
    return loss


def score_step(step: int, inputs: list[torch.Tensor], clients: list[BatchClient], server: BatchServer,
               transport, selected: Collection[int] | None = None, samples: np.ndarray | None = None) -> torch.Tensor:
    """Class scores of one evaluation batch."""
    received = _send(step, inputs, clients, transport, selected, False, samples)
    return server.logits(step, received, len(inputs[0]))


def predict_step(step: int, inputs: list[torch.Tensor], clients: list[BatchClient], server: BatchServer,
                 transport, selected: Collection[int] | None = None, samples: np.ndarray | None = None) -> np.ndarray:
    """Predicted classes of one evaluation batch."""
    return score_step(step, inputs, clients, server, transport, selected, samples).argmax(dim=1).numpy()
