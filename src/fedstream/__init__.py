"""fedstream: federated learning when data arrives as a stream."""

__version__ = "0.1.0"
