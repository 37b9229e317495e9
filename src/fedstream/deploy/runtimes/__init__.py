"""Runtimes: what moves a deployment's envelopes between the server and the client nodes, and
nothing else (in this process, Flower, gRPC)."""
