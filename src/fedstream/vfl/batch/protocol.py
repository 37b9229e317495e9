"""One step of batch VFL, written against parties and a transport only (the paper's Algorithm 1).

Training step t: every selected client sends its embedding of the batch (up, lines 2-6); the
server fills in the others (padding), concatenates, learns and sends each sender dL/dE (down,
lines 10-17); each sender learns from what it received (lines 7-8). Evaluation: the selected
clients' embeddings up, the server predicts; nothing down. Whatever the transport does to the
values (sparsify, cache-fill, quantise) is what parties see. Unselected clients send nothing.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import torch

from fedstream.vfl.batch.parties import BatchClient, BatchServer


def _send(step: int, inputs: list[torch.Tensor], clients: list[BatchClient], transport, selected, train: bool) -> list:
    out = []
    for client, x in zip(clients, inputs):
        if selected is not None and client.index not in selected:
            out.append(None)
        else:
            out.append(transport.up(client.embed(step, x) if train else client.infer(step, x)))
    return out


def train_step(step: int, inputs: list[torch.Tensor], labels: torch.Tensor, clients: list[BatchClient],
               server: BatchServer, transport, selected: Collection[int] | None = None) -> float:
    """One mini-batch of training with the ``selected`` clients (None: all); returns the server's loss."""
    received = _send(step, inputs, clients, transport, selected, train=True)
    loss, gradients = server.train_step(step, received, labels)
    for grad in gradients:
        grad = transport.down(grad)
        clients[grad.client].on_gradient(grad)
    return loss


def score_step(step: int, inputs: list[torch.Tensor], clients: list[BatchClient], server: BatchServer,
               transport, selected: Collection[int] | None = None) -> torch.Tensor:
    """Class scores of one evaluation batch."""
    received = _send(step, inputs, clients, transport, selected, train=False)
    return server.logits(step, received, len(inputs[0]))


def predict_step(step: int, inputs: list[torch.Tensor], clients: list[BatchClient], server: BatchServer,
                 transport, selected: Collection[int] | None = None) -> np.ndarray:
    """Predicted classes of one evaluation batch."""
    return score_step(step, inputs, clients, server, transport, selected).argmax(dim=1).numpy()
