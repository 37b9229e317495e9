"""Flat state dictionaries for checkpoints: ``{"prefix.key": array}`` over named parts."""

from __future__ import annotations

import numpy as np


def collect(parts: dict[str, object]) -> dict[str, np.ndarray]:
    """Merge the ``state_dict()`` of each part under ``"<name>."``."""
    state: dict[str, np.ndarray] = {}
    for name, part in parts.items():
        state |= {f"{name}.{k}": v for k, v in part.state_dict().items()}
    return state


def restore(parts: dict[str, object], state: dict[str, np.ndarray]) -> None:
    """Give each part the entries saved under its name by :func:`collect`."""
    for name, part in parts.items():
        prefix = f"{name}."
        part.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})


class StateOfParts:
    """``state_dict`` / ``load_state_dict`` of an object whose state is that of its named parts
    (``_parts()``: name -> an object with ``state_dict`` and ``load_state_dict``), each under
    ``"<name>."`` (:func:`collect`, :func:`restore`)."""

    def _parts(self) -> dict[str, object]:
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        return collect(self._parts())

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        restore(self._parts(), state)
