"""The in-process transport: every message is really encoded, counted and decoded.

The receiver gets the decoded copy, so a simulation sees exactly what a network peer would
(float32 values, validated headers) and the ledger counts exactly the bytes that were encoded.
"""

from __future__ import annotations

from fedstream.errors import ProtocolError
from fedstream.transport.codec import decode, encode
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.messages import Message


class InProcessTransport:
    """Moves messages between parties living in one process."""

    def __init__(self, n_clients: int):
        self.ledger = ByteLedger(n_clients)

    def up(self, msg: Message, samples=None) -> Message:
        """Client ``msg.client`` -> server (``samples``, the rows' sample ids, is for compressed links'
        per-sample caches; the plain format keeps no state, so it is ignored here)."""
        return self._carry(msg, "up")

    def down(self, msg: Message) -> Message:
        """Server -> client ``msg.client``."""
        return self._carry(msg, "down")

    def fork(self) -> InProcessTransport:
        """A transport for the same clients with a fresh ledger (the plain format keeps no other state)."""
        return InProcessTransport(len(self.ledger.up))

    def _carry(self, msg: Message, direction: str) -> Message:
        data = encode(msg)
        try:
            self.ledger.add(msg.client, direction, len(data))
        except IndexError:  # encode took the client id; only the ledger knows how many there are
            raise ProtocolError(f"{type(msg).__name__} names client {msg.client}; "
                                f"this transport links clients 0..{len(self.ledger.up) - 1}") from None
        return decode(data)
