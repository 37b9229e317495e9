"""The bottom layer: the typed messages parties exchange, their bytes, and the transports that count them.

``messages`` (Embedding, Gradient, Query) and ``updates`` (ModelUpdate) are the records; ``codec``,
``wire``, ``tensors`` and ``stacked`` their exact bytes; ``ledger`` counts what is encoded.

:class:`InProcessTransport` carries the plain float32 format; :class:`CompressedTransport` carries
per-direction compressed payloads (:class:`CompressionSpec`); :func:`make_transport` picks one.
"""

from fedstream.transport.codec import decode, encode
from fedstream.transport.compressed import CompressedTransport, CompressionSpec, make_transport
from fedstream.transport.inprocess import InProcessTransport
from fedstream.transport.ledger import ByteLedger

__all__ = ["ByteLedger", "CompressedTransport", "CompressionSpec", "InProcessTransport", "decode", "encode",
           "make_transport"]
