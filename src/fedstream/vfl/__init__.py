"""Batch VFL (task ``vfl``): vertical FL over epochs with bidirectional compression (issue 7).

Start here: ``run_batch_vfl(BatchVFLSettings(...), data_root, seed=0)`` in ``trainer`` (one run).
M clients hold row strips of every image (``data``) and a bottom model each, the server the labels
and a top model (``models``, ``parties``); ``protocol`` is one step through a compressing transport.
``settings`` holds the keys, ``selection`` (+ ``selection_spec``) who sends per epoch (VF-PS),
``checkpoint`` the run folder, ``paper`` the paper's named comparisons; ``docs/vfl-compression.md``.
"""

from fedstream.vfl.parties import BatchClient, BatchServer
from fedstream.vfl.results import COLUMNS
from fedstream.vfl.settings import CONFIG_KEYS, BatchVFLSettings
from fedstream.vfl.trainer import run_batch_vfl

__all__ = ["COLUMNS", "CONFIG_KEYS", "BatchClient", "BatchServer", "BatchVFLSettings", "run_batch_vfl"]
