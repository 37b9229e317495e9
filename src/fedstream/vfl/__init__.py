"""Batch (offline) vertical FL with bidirectional compression (issue 7, the compression paper).

M clients hold row strips of every image and a bottom model each; the server holds the labels
and a top model; mini-batch SGD over epochs; the embeddings (up) and gradients (down) travel
through a transport whose per-direction codecs come from ``compression.*``. Entry point:
:func:`run_batch_vfl` with :class:`BatchVFLSettings`.
"""

from fedstream.vfl.parties import BatchClient, BatchServer
from fedstream.vfl.results import COLUMNS
from fedstream.vfl.settings import CONFIG_KEYS, BatchVFLSettings
from fedstream.vfl.trainer import run_batch_vfl

__all__ = ["COLUMNS", "CONFIG_KEYS", "BatchClient", "BatchServer", "BatchVFLSettings", "run_batch_vfl"]
