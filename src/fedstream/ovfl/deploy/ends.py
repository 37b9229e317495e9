"""The online VFL server's end of every client's compressed link, for its transport
(:class:`fedstream.ovfl.deploy.proxy.LinkTransport`).

Compression (``compression.*``, :mod:`fedstream.transport.compressed`): the server keeps its end of
every client's link (:class:`ServerEnds`: one :class:`~fedstream.transport.compressed.ServerEndpoint`
per client, with its embedding cache and quantiser table), the node the other end. The
transport's ``up`` decodes an embedding with the client's end when ``play_round`` takes it, in
round order, so the cache is updated only from embeddings of replies that passed every check; its
``down`` encodes a gradient with it, in the order the server produces them, exactly as the simulator's
:class:`~fedstream.transport.compressed.CompressedTransport` does. The ledger counts the encoded
(compressed) bytes. Nothing else needs matching between the two ends when a node is down or comes
back: every compressed payload carries what its decoder needs (top-k's bitmap, the quantiser's mu
and sigma); a cache row the server never received is zero (plain top-k for it).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedstream.transport.compressed import CompressionSpec, ServerEndpoint, up_codec


class ServerEnds:
    """The server's end of every client's compressed link, with their state for the checkpoint."""

    def __init__(self, n_clients: int, spec: CompressionSpec):
        self.spec = spec
        self.ends = [ServerEndpoint(m, spec) for m in range(n_clients)]
        up = up_codec(replace(spec, cache=False))
        # stateless: validates an embedding before ``ends`` sees it
        self.probe = (None if up is None else up[1])
        self.setting = f"compression.up = {spec.up!r}"

    def __getitem__(self, m: int) -> ServerEndpoint:
        return self.ends[m]

    def state_dict(self) -> dict[str, np.ndarray]:
        """Each end's embedding cache and quantiser table, under ``"<client>."``."""
        return {f"{end.client}.{k}": v for end in self.ends for k, v in end.state_dict().items()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for end in self.ends:
            prefix = f"{end.client}."
            end.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
