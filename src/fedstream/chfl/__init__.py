"""Horizontal FL with heterogeneous features: CHFL (continual horizontal FL) and its baselines.

Paper: Mori, Teranishi, Furukawa, "Continual Horizontal Federated Learning for Heterogeneous
Data" (``../shared/papers/chfl_continual_horizontal_fl.txt``). Typical use::

    from fedstream.chfl import CHFLSettings, run_chfl
    result = run_chfl(CHFLSettings(dataset="covertype"), None, method="chfl", seed=0)
    result["variants"]["mu>0"]["test_acc"], result["bytes"]["total"]

Modules: ``splits`` (common/unique features, rows), ``models`` (columns, lateral connections),
``fedavg`` (FedAvg, FedProx), ``messages`` (ModelUpdate; bytes in ``transport/tensors.py``),
``client``, ``selection`` (validation-based choice), ``trainer`` (one experiment), ``table``
(the paper's tables on every core), ``stream`` (streaming CHFL with a late joiner),
``checkpoint`` (run folders: metrics rows as produced, checkpoints, exact resume). Method,
interpretations and speed: ``docs/chfl.md``.
"""

from fedstream.chfl.settings import METHODS, CHFLSettings
from fedstream.chfl.stream import StreamSettings, run_stream
from fedstream.chfl.trainer import run_chfl, run_on_table

__all__ = ["METHODS", "CHFLSettings", "StreamSettings", "run_chfl", "run_on_table", "run_stream"]
