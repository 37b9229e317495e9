"""Runtimes: what moves a deployment's envelopes between the server and the client nodes, and
nothing else. :mod:`~fedstream.deploy.runtimes.loopback` (in this process),
:mod:`~fedstream.deploy.runtimes.flower` and :mod:`~fedstream.deploy.runtimes.flower_grid` (Flower;
needs ``pip install 'fedstream[flower]'``) and the gRPC runtime (:mod:`~fedstream.deploy.runtimes.grpc`).
The byte-counting TCP relay of ``fedstream bench network`` is :mod:`fedstream.bench.relay`."""
