"""One step of batch VFL, written against parties and a transport only (the paper's Algorithm 1).

Training step t: every client sends its embedding of the batch (up, lines 2-6); the server fills
and concatenates them, learns and sends each client dL/dE (down, lines 10-17); each client learns
from what it received (lines 7-8). Evaluation: embeddings up, the server predicts; nothing down.
Whatever the transport does to the values (sparsify, cache-fill, quantise) is what parties see.
"""

from __future__ import annotations

import numpy as np
import torch

from fedstream.vfl.batch.parties import BatchClient, BatchServer


def train_step(step: int, inputs: list[torch.Tensor], labels: torch.Tensor, clients: list[BatchClient],
               server: BatchServer, transport) -> float:
    """One mini-batch of training; returns the server's loss."""
    received = [transport.up(client.embed(step, x)) for client, x in zip(clients, inputs)]
    loss, gradients = server.train_step(step, received, labels)
    for grad in gradients:
        grad = transport.down(grad)
        clients[grad.client].on_gradient(grad)
    return loss


def predict_step(step: int, inputs: list[torch.Tensor], clients: list[BatchClient], server: BatchServer,
                 transport) -> np.ndarray:
    """Predicted classes of one evaluation batch."""
    received = [transport.up(client.infer(step, x)) for client, x in zip(clients, inputs)]
    return server.predict(step, received, len(inputs[0]))
