"""CHFL: horizontal FL over clients with heterogeneous features (Mori et al.), and its baselines.

Start here: ``run_chfl(CHFLSettings(dataset="covertype"), None, method="chfl")`` (``trainer``: one run);
from Python code on arrays, the scikit-learn-style ``CHFLClassifier`` (``estimator``).
A run goes ``settings`` -> ``plan`` (feature/row splits, initial weights) -> ``rounds`` (the server's
FedAvg loop) over ``cohort`` (the clients' side of a round) -> ``trainer`` (the result). Blocks:
``splits``, ``models`` (columns, lateral links), ``fedavg``, ``client``, ``selection``; ``deploy/``.
Around them: ``table`` (the paper's tables), ``stream`` (streaming CHFL), ``checkpoint``; ``docs/chfl.md``.
"""

from fedstream.lazy import lazy_exports

# The public names are loaded on first use (PEP 562): the modules behind them import PyTorch
# (1.5-2 s), and the config loader, the command line and online VFL import this package for its
# config keys (``chfl.config``) only.
_EXPORTS = {
    "METHODS": "settings",
    "CHFLSettings": "settings",
    "CHFLClassifier": "estimator",
    "StreamSettings": "stream",
    "run_stream": "stream",
    "run_chfl": "trainer",
    "run_on_table": "trainer",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports("fedstream.chfl", _EXPORTS)
