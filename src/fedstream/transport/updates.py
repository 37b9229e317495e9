"""The message of horizontal FL: a model (or part of one) with the number of samples behind it.

Server -> client: the global common column θ_c^t for round t (Algorithm 1/2, line 4).
Client -> server: the client's locally trained θ_{c,k}^t and its train sample count n_k, the
weight FedAvg gives it. Only a transport turns messages into bytes
(:mod:`fedstream.transport.tensors`), so the bytes counted are the bytes a network would carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from fedstream.errors import ProtocolError


class ModelUpdate(NamedTuple):
    """Named float32 tensors for ``round`` to/from ``client``, trained on ``n_samples`` samples."""

    round: int
    client: int
    tensors: Mapping[str, np.ndarray]
    n_samples: int


def check_update(msg: object) -> ModelUpdate:
    """Return ``msg`` if it is a well-formed ModelUpdate, else raise ProtocolError saying why."""
    if not isinstance(msg, ModelUpdate):
        raise ProtocolError(f"expected a ModelUpdate, received {type(msg).__name__}")
    for field in ("round", "client", "n_samples"):
        v = getattr(msg, field)
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise ProtocolError(f"ModelUpdate.{field}: expected an integer >= 0, received {v!r}")
    if not isinstance(msg.tensors, Mapping) or not msg.tensors:
        raise ProtocolError(f"ModelUpdate.tensors: expected a non-empty mapping of name -> array, "
                            f"received {type(msg.tensors).__name__}")
    for name, t in msg.tensors.items():
        if not isinstance(name, str) or not name:
            raise ProtocolError(f"ModelUpdate.tensors: expected non-empty str names, received {name!r}")
        if not isinstance(t, np.ndarray):
            raise ProtocolError(f"ModelUpdate.tensors[{name!r}]: expected a numpy array, "
                                f"received {type(t).__name__}")
    return msg
