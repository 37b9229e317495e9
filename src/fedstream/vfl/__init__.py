"""Batch VFL (task ``vfl``): vertical FL over epochs with bidirectional compression (issue 7).

Start here: ``run_batch_vfl(BatchVFLSettings(...), data_root, seed=0)`` in ``trainer`` (one run);
from Python code on arrays, the scikit-learn-style ``VFLClassifier`` (``estimator``).
M clients hold row strips of every image (``data``) and a bottom model each, the server the labels
and a top model (``models``, ``parties``); ``protocol`` is one step through a compressing transport.
``settings`` holds the keys, ``selection`` (+ ``selection_spec``) who sends per epoch (VF-PS),
``checkpoint`` the run folder, ``paper`` the paper's named comparisons; ``docs/vfl-compression.md``.
"""

from fedstream.lazy import lazy_exports

# The public names are loaded on first use (PEP 562): the modules behind them import PyTorch
# (1.5-2 s), and the config loader, the command line and online VFL import this package for its
# config keys (``vfl.config``) only.
_EXPORTS = {
    "BatchClient": "parties",
    "BatchServer": "parties",
    "COLUMNS": "results",
    "CONFIG_KEYS": "settings",
    "BatchVFLSettings": "settings",
    "VFLClassifier": "estimator",
    "run_batch_vfl": "trainer",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports("fedstream.vfl", _EXPORTS)
