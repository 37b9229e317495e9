"""The digamma function ψ at positive integers, as eq. (1) of VF-PS needs it.

Every argument of eq. (1) — N, N_q, K and m_q — is a count, so ψ is only ever evaluated at positive
integers. Two variants:

* ``"approx"``: ψ(x) ≈ ln x − 1/(2x), the approximation the paper states (§2.1.1) and the VF-PS
  reference scripts use (the default);
* ``"exact"``: ψ(n) = −γ + Σ_{i=1}^{n−1} 1/i, exact at integers (what scikit-learn's KSG estimators
  use through ``scipy.special.digamma``), with no scipy dependency.
"""

from __future__ import annotations

import numpy as np

from fedstream.errors import ConfigError

PSI_METHODS = ("approx", "exact")
EULER_GAMMA = 0.5772156649015329


def check_psi(method: str) -> str:
    """Return ``method`` if it is a known ψ variant, else raise ConfigError naming the choices."""
    if method not in PSI_METHODS:
        raise ConfigError(f"psi must be one of {', '.join(map(repr, PSI_METHODS))}, got {method!r}")
    return method


def psi(x, method: str = "approx") -> np.ndarray:
    """ψ(x) for positive integers ``x`` (array-like), by ``method`` (``"approx"`` or ``"exact"``)."""
    check_psi(method)
    x = np.asarray(x, dtype=np.int64)
    if x.size and x.min() < 1:
        raise ConfigError(f"psi is only defined here for positive integers, got minimum {int(x.min())}")
    xf = x.astype(np.float64)
    if method == "approx":
        return np.log(xf) - 0.5 / xf
    top = int(x.max()) if x.size else 1
    harmonic = np.concatenate(([0.0], np.cumsum(1.0 / np.arange(1, top, dtype=np.float64))))
    return harmonic[x - 1] - EULER_GAMMA
