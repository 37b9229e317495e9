"""Transports move encoded messages between parties and count their bytes.

:class:`InProcessTransport` carries the plain float32 format; :class:`CompressedTransport` carries
per-direction compressed payloads (:class:`CompressionSpec`); :func:`make_transport` picks one.
"""

from fedstream.transport.codec import decode, encode
from fedstream.transport.compressed import (
           CompressedTransport,
           CompressionSpec,
           make_transport,
)
from fedstream.transport.inprocess import InProcessTransport
from fedstream.transport.ledger import ByteLedger

__all__ = [
           "ByteLedger",
           "CompressedTransport",
           "CompressionSpec",
           "InProcessTransport",
           "decode",
           "encode",
           "make_transport",
]
