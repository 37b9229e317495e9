"""The records of serving (:mod:`fedstream.deploy.serving`): what the server party and a client node
say to each other when the deployed parties predict together. They travel as the messages of the
same names in ``protocol.proto`` (the frame's ``info`` fields 40-49)."""

from __future__ import annotations

from dataclasses import dataclass

from fedstream.deploy.records import Record
from fedstream.errors import ProtocolError

MAX_REQUEST = 4096  # ids per request to the nodes (an Embedding's rows are a u16; a frame stays small)


@dataclass(kw_only=True)
class PredictRequest(Record):
    """Server to node: embed your own rows of these ids (1 .. MAX_REQUEST, non-empty text)."""

    ids: list[str]

    def check(self, where: str, **context) -> None:
        if not 1 <= len(self.ids) <= MAX_REQUEST:
            raise ProtocolError(f"{where}: a predict request takes 1 to {MAX_REQUEST} ids, received "
                                f"{len(self.ids)}")
        if any(not i.strip() for i in self.ids):
            raise ProtocolError(f"{where}: a predict request holds an empty id")


@dataclass(kw_only=True)
class PredictReply(Record):
    """Node to server (with one Embedding part of len(ids) rows): per id, 1 where its file holds it."""

    held: list[int]

    def check(self, where: str, *, rows: int | None = None, **context) -> None:
        if rows is not None and len(self.held) != rows:
            raise ProtocolError(f"{where}: info 'held' must give one 0 or 1 per id ({rows}), received "
                                f"{len(self.held)}")
        if any(h not in (0, 1) for h in self.held):
            raise ProtocolError(f"{where}: info 'held' must hold zeros and ones")


@dataclass(kw_only=True)
class PredictSetupReply(Record):
    """Node to server at the setup of serving: the model it loaded (its digest), its embedding's
    width and the file it came from."""

    client: int
    digest: str
    width: int
    saved: str | None = None
