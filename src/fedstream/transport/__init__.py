"""Transports move encoded messages between parties and count their bytes."""

from fedstream.transport.codec import decode, encode
from fedstream.transport.inprocess import InProcessTransport
from fedstream.transport.ledger import ByteLedger

__all__ = ["encode", "decode", "InProcessTransport", "ByteLedger"]
