"""Run-time metrics: prequential error, activation rates, compute time."""

from fedstream.metrics.prequential import Prequential

__all__ = ["Prequential"]
