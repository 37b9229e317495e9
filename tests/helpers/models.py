"""Comparing the models of two runs (a deployment and the simulator, or two deployments)."""

from __future__ import annotations

import numpy as np


def assert_same_models(got: dict, want: dict, *, atol: float = 0.0) -> None:
    """The same keys (a party, or a tensor's name), and under each the same array or list of arrays:
    bitwise with ``atol = 0`` (the default), else within ``atol``."""
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for key, value in want.items():
        mine = got[key] if isinstance(got[key], (list, tuple)) else [got[key]]
        theirs = value if isinstance(value, (list, tuple)) else [value]
        for x, y in zip(mine, theirs, strict=True):
            if atol == 0:
                np.testing.assert_array_equal(x, y, err_msg=str(key))
            else:
                np.testing.assert_allclose(x, y, rtol=0, atol=atol, err_msg=str(key))
