"""The ``device`` key of the torch parties (batch VFL, CHFL): ``auto`` | ``cpu`` | ``cuda``.

``auto`` is CUDA when ``torch.cuda.is_available()``, else the CPU. A party's model and the batches it
computes on live on the device; every message leaves as CPU arrays (bytes are counted from what is
encoded, wherever the numbers were computed), and what a party receives goes back to its device.
"""

from __future__ import annotations

import torch

from fedstream.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str | None) -> torch.device:
    """The torch device ``name`` stands for; ConfigError for an unknown name or ``cuda`` without CUDA."""
    name = "auto" if name is None else name
    if name not in DEVICES:
        raise ConfigError(f"device = {name!r}: expected one of {', '.join(DEVICES)}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device = 'cuda': no CUDA device here (torch.cuda.is_available() is False); use "
                          "'auto' or 'cpu'")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
