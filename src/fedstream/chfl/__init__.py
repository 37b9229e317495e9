"""CHFL: horizontal FL over clients with heterogeneous features (Mori et al.), and its baselines.

Start here: ``run_chfl(CHFLSettings(dataset="covertype"), None, method="chfl")`` (``trainer``: one run).
A run goes ``settings`` -> ``plan`` (feature/row splits, initial weights) -> ``rounds`` (the server's
FedAvg loop) over ``cohort`` (the clients' side of a round) -> ``trainer`` (the result). Blocks:
``splits``, ``models`` (columns, lateral links), ``fedavg``, ``messages``, ``client``, ``selection``.
Around them: ``table`` (the paper's tables), ``stream`` (streaming CHFL), ``checkpoint``; ``docs/chfl.md``.
"""

from fedstream.chfl.settings import METHODS, CHFLSettings
from fedstream.chfl.stream import StreamSettings, run_stream
from fedstream.chfl.trainer import run_chfl, run_on_table

__all__ = ["METHODS", "CHFLSettings", "StreamSettings", "run_chfl", "run_on_table", "run_stream"]
