"""The declared seams of fedstream: one :class:`typing.Protocol` per kind of replaceable part.

A seam is a place where one implementation can be swapped for another without the code around it
knowing: a codec under a transport, a transport under the protocol, a policy, an optimiser or a
padding under a party. Each Protocol below states the methods that code may call and, in its
docstring, the contract every implementation keeps. ``tests/contracts/`` checks every
implementation against its seam's contract (round trip, state, errors, byte counts); a new codec,
policy or optimiser is covered by adding one line to its registry there.

The contracts shared by every seam:

* **errors**: bad input at a public boundary raises a :class:`fedstream.errors.FedstreamError`
  (``ConfigError`` for settings, ``DataError`` for data, ``ProtocolError`` for messages and
  bytes), never a bare ``ValueError``/``IndexError`` from deep inside;
* **state** (:class:`Stateful`): ``load_state_dict(state_dict())`` into a freshly built object of
  the same configuration gives an object that continues exactly, bit for bit, as the original;
* **bytes**: what a ledger counts is the length of the bytes that were encoded, nothing else.

This module imports nothing at run time (types only), so any layer may import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:  # types only: no import cycle whatever layer imports the seams
    from fedstream.models import LayerGrad
    from fedstream.ovfl.server import RoundResult
    from fedstream.transport.ledger import ByteLedger
    from fedstream.transport.messages import Embedding, Gradient, Message, Query
    from fedstream.transport.updates import ModelUpdate

State = dict[str, np.ndarray]


@runtime_checkable
class Stateful(Protocol):
    """Something a checkpoint saves: flat ``{name: array}`` state.

    Contract: for ``b`` built like ``a`` (same configuration, any seed),
    ``b.load_state_dict(a.state_dict())`` makes ``b`` behave as ``a`` from then on, bit for bit;
    ``state_dict`` returns copies (training on does not change a saved state).
    """

    def state_dict(self) -> State: ...

    def load_state_dict(self, state: State) -> None: ...


# --- codecs ------------------------------------------------------------------------------------
@runtime_checkable
class Codec(Protocol):
    """A payload codec: float array -> bytes -> float array (:mod:`fedstream.compression`).

    Contract:

    * ``decode(encode(v), v.shape)`` gives a float32 array of ``v.shape``: ``v`` itself for a
      lossless codec (:class:`~fedstream.compression.Float32Codec`), the documented
      approximation for a lossy one (top-k: the kept entries exact, the others 0; sign: +-1 or
      +-mean|v|; 3-sigma quantiser: the nearest grid point or 0);
    * encoding is deterministic: the same input (and state) gives the same bytes;
    * ``encode`` rejects non-float or non-finite input, ``decode`` any byte string that does not
      describe exactly ``prod(shape)`` entries, both with ``ProtocolError``.

    Stateful codecs take their state as an extra ``encode`` argument (the gradient ranking of
    :class:`~fedstream.compression.GradientRankedTopK`, optional; the
    :class:`~fedstream.compression.QuantizerState` of the 3-sigma quantiser, required), so the
    quantiser is reached through :class:`PayloadSender` rather than this seam.
    """

    def encode(self, values: np.ndarray) -> bytes: ...

    def decode(self, data: bytes, shape: tuple[int, ...]) -> np.ndarray: ...


@runtime_checkable
class MessageCodec(Protocol):
    """Typed message <-> bytes (the wire format; :mod:`fedstream.transport.codec` is one).

    Contract: ``decode(encode(m))`` equals ``m`` field for field (float32 values bit for bit),
    ``len(encode(m))`` is what a ledger counts for ``m``, and ``decode`` raises ``ProtocolError``
    for any truncated, oversized or unknown byte string (``NonFiniteError`` for NaN/inf values).
    """

    def encode(self, msg: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


@runtime_checkable
class PayloadSender(Stateful, Protocol):
    """One link direction's encoding end (:mod:`fedstream.transport.links`).

    ``wire`` is the codec byte of the frame; ``payload`` turns a message's values into payload
    bytes and may update the sender's state (the quantiser's mu, sigma table);
    ``observe_gradient`` is shown every gradient the client receives (the ranked top-k's input).
    Contract: a :class:`PayloadReceiver` of the same ``wire`` decodes the payload to the codec's
    documented approximation; state as :class:`Stateful`.
    """

    wire: int

    def payload(self, values: np.ndarray) -> bytes: ...

    def observe_gradient(self, values: np.ndarray) -> None: ...


@runtime_checkable
class PayloadReceiver(Stateful, Protocol):
    """One link direction's decoding end: payload bytes -> values (may keep a per-sample cache).

    Contract: malformed payloads raise ``ProtocolError``; state as :class:`Stateful`.
    """

    wire: int

    def values(self, payload: memoryview, shape: tuple[int, int], *, round: int = 0,
               samples: np.ndarray | None = None) -> np.ndarray: ...


# --- transports --------------------------------------------------------------------------------
@runtime_checkable
class Transport(Protocol):
    """Moves one message between a client and the server, really encoding and decoding it.

    ``up``: client ``msg.client`` -> server; ``down``: server -> client ``msg.client``. The
    receiver gets the decoded copy (lossy where the link compresses), exactly what a network
    peer would get. Contract: each call adds ``len(encoded bytes)`` to
    ``ledger.up[msg.client]`` (or ``down``) and 1 to ``ledger.messages[msg.client]``; a message
    for a client outside the transport, or one that does not encode, raises ``ProtocolError``.
    Transports never look at what parties do with the messages.
    """

    ledger: ByteLedger

    def up(self, msg: Any) -> Any: ...

    def down(self, msg: Any) -> Any: ...


@runtime_checkable
class ForkableTransport(Transport, Protocol):
    """A transport that can hand out an independent copy with a fresh ledger (for evaluation).

    Contract: traffic through the fork changes neither the original's ledger nor its link state.
    """

    def fork(self) -> ForkableTransport: ...


@runtime_checkable
class StackedTransport(Protocol):
    """Carries the messages of K stacked runs (``msg.runs``), one frame per run.

    Contract: frame j is byte for byte what run ``runs[j]`` alone would send, and after
    :meth:`write_back` run k's ledger ``ledgers[k]`` holds exactly the bytes of run k's frames.
    """

    ledgers: list[ByteLedger]

    def up(self, msg: Any) -> Any: ...

    def down(self, msg: Any) -> Any: ...

    def write_back(self) -> None: ...


@runtime_checkable
class LinkEnd(Stateful, Protocol):
    """One party's end of one client's link (:mod:`fedstream.transport.compressed`).

    ``send`` gives the bytes of a message (what is counted), ``receive`` the message bytes from
    the other end decode to. Contract: the other end's ``receive(send(m))`` is what a transport
    delivers for ``m``; bytes for another client's link raise ``ProtocolError``.
    """

    client: int

    def send(self, msg: Message) -> bytes: ...

    def receive(self, data: bytes, samples: np.ndarray | None = None) -> Message: ...


# --- activation policies -----------------------------------------------------------------------
@runtime_checkable
class ActivationPolicy(Protocol):
    """Which clients an event activates, one chunk of rounds at a time (:mod:`fedstream.ovfl.activation`).

    Contract: ``mask(chunk, block_means)`` is a bool array of ``block_means.shape`` (rounds,
    clients) that depends only on the policy's configuration, its seed, ``chunk``, the block
    means and (for a learning policy) what it has observed, never on how many chunks this object
    has masked before: a run that resumes at chunk c sees the masks the uninterrupted run saw.
    ``queried(mask)`` is None (every passive client is queried) or a bool array of the mask's
    shape; ``observe`` is called once per complete chunk. A policy that learns is also
    :class:`Stateful`. Invalid settings raise ``ConfigError``.
    """

    name: str
    n_clients: int

    def mask(self, chunk: int, block_means: np.ndarray) -> np.ndarray: ...

    def queried(self, mask: np.ndarray) -> np.ndarray | None: ...

    def observe(self, blocks: list[np.ndarray], labels: np.ndarray) -> None: ...


@runtime_checkable
class StandIn(Protocol):
    """The server's stand-in for clients it does not query (``topl``; :class:`Server` ``stand_in``).

    ``fill(client, rows)`` is the float32 padding for the client this round; ``received`` shows it
    the server's input row and which of its embeddings were really sent. Contract: ``fill`` depends
    only on the embeddings really sent before (padded ones never feed the padding), and the stand-in
    is :class:`Stateful`, so a resumed server pads exactly as the uninterrupted one.
    """

    def fill(self, client: int, rows: int) -> np.ndarray: ...

    def received(self, y: int, row: np.ndarray, real: np.ndarray) -> None: ...


# --- optimisers --------------------------------------------------------------------------------
@runtime_checkable
class Optimiser(Stateful, Protocol):
    """The update rule of one online VFL party's model (:mod:`fedstream.optim`).

    ``step`` takes this round's gradient as per-layer factors; ``skip`` marks a passive round
    (a zero enters a windowed optimiser's window). Contract: state as :class:`Stateful` together
    with the model's own state (a deferred DLR keeps part of the weights); the same gradients give
    the same parameters bit for bit; invalid settings raise ``ConfigError``.
    """

    name: str
    lr: float

    def step(self, grads: list[LayerGrad]) -> None: ...

    def skip(self) -> None: ...


@runtime_checkable
class OptimiserStack(Protocol):
    """The optimisers of K stacked runs (:mod:`fedstream.optim.stack`), built from the runs' own.

    ``step(grads, active)`` updates the runs flagged in ``active`` and treats the others as
    passive; ``write_back`` copies run k's state into ``optimizers[k]``. Contract: after any
    sequence of steps and a write-back, run k's model and optimiser equal those of run k played
    alone with its own optimiser, and a stack built from resumed optimisers continues them.
    """

    def step(self, grads: list, active: np.ndarray) -> None: ...

    def write_back(self, optimizers: list) -> None: ...


# --- padding -----------------------------------------------------------------------------------
@runtime_checkable
class Padding(Stateful, Protocol):
    """What stands in for an unselected client's embedding (:mod:`fedstream.selection.padding`).

    Contract: ``fill(client, n)`` is (n, dim) (or (dim,) without n) and depends only on the rows
    received from that client, in order; ``update`` client by client and ``update_rows`` for a
    round give the same state; a client outside 0..n_clients-1 raises ``ConfigError``, an
    embedding of the wrong width or with NaN/inf ``DataError``; state as :class:`Stateful`.
    """

    name: str
    n_clients: int
    dim: int

    def update(self, client: int, embedding: np.ndarray) -> None: ...

    def update_rows(self, rows: np.ndarray, sent: np.ndarray) -> None: ...

    def fill(self, client: int, n: int | None = None) -> np.ndarray: ...

    def assemble(self, embeddings: Sequence[np.ndarray | None], n: int) -> list[np.ndarray]: ...


# --- parties -----------------------------------------------------------------------------------
@runtime_checkable
class OnlineClientParty(Stateful, Protocol):
    """A feature-holding party of online VFL (:class:`fedstream.ovfl.client.Client`).

    Per round: ``observe`` its feature block; then either ``on_event`` (activated: send the
    embedding, later ``on_gradient``) or ``on_query`` (passive: answer, learn nothing).
    Contract: messages for another round or of the wrong shape raise ``ProtocolError``; state as
    :class:`Stateful` (model, optimiser, input window).
    """

    index: int

    def observe(self, t: int, x: np.ndarray) -> None: ...

    def on_event(self, t: int) -> Embedding: ...

    def on_query(self, query: Query) -> Embedding: ...

    def on_gradient(self, grad: Gradient) -> None: ...


@runtime_checkable
class OnlineServerParty(Stateful, Protocol):
    """The label-holding party of online VFL (:class:`fedstream.ovfl.server.Server`).

    Contract: ``on_embeddings`` predicts before it learns and returns one gradient per active
    client; embeddings of the wrong count, client, round or shape raise ``ProtocolError``; state
    as :class:`Stateful` (model, optimiser, label window).
    """

    n_clients: int

    def query(self, t: int, client: int) -> Query: ...

    def pad(self, t: int, client: int) -> Embedding: ...

    def on_embeddings(
        self, t: int, y: int, embeddings: list[Embedding], active: list[int]
    ) -> RoundResult: ...


@runtime_checkable
class SegmentPath(Protocol):
    """Plays a segment of a chunk's online VFL rounds at once, in the engine's loop
    (:meth:`fedstream.ovfl.engine.OnlineRun.play_chunk`): the simulator's fused path, a deployed
    server's compiled batches.

    Contract: when ``ready(j1 - j0)``, ``play(X, y, mask, j0, j1)`` plays rows j0..j1-1 of the
    chunk (features ``X``, None where the nodes hold them; labels ``y``; activations ``mask``) and
    leaves the models, the ledger's counts and the predictions it returns exactly as
    :func:`fedstream.ovfl.protocol.play_round` would, round by round; it returns -1, or the first
    row whose messages held NaN or inf (the rows before it played).
    """

    def ready(self, rounds: int) -> bool: ...

    def play(
        self, X: np.ndarray | None, y: np.ndarray, mask: np.ndarray, j0: int, j1: int
    ) -> tuple[np.ndarray, int]: ...


@runtime_checkable
class BatchClientParty(Protocol):
    """A client of batch VFL (:class:`fedstream.vfl.parties.BatchClient`): embed a batch, later
    back-propagate the gradient received for it. Contract: a gradient for another round, client
    or shape raises ``ProtocolError``. State lives in ``model`` and ``optimizer`` (torch)."""

    index: int

    def embed(self, step: int, x: Any) -> Embedding: ...

    def infer(self, step: int, x: Any) -> Embedding: ...

    def on_gradient(self, grad: Gradient) -> None: ...


@runtime_checkable
class BatchServerParty(Protocol):
    """The server of batch VFL (:class:`fedstream.vfl.parties.BatchServer`). Contract: received
    embeddings of the wrong count, client, round or shape raise ``ProtocolError``; ``None``
    stands for an unselected client and needs a padding."""

    n_clients: int

    def train_step(
        self, step: int, embeddings: list[Embedding | None], labels: Any
    ) -> tuple[float, list]: ...

    def predict(self, step: int, embeddings: list[Embedding | None], rows: int) -> np.ndarray: ...


@runtime_checkable
class FederatedClientParty(Protocol):
    """A CHFL client (:class:`fedstream.chfl.client.Client`): receive the global common column,
    train locally, upload its own. Contract: ``load_state(state())`` (a deep copy) into a client
    built alike makes it train on exactly as the original, bit for bit."""

    def receive(self, update: ModelUpdate) -> None: ...

    def upload(self) -> ModelUpdate: ...

    def train_epochs(self, epochs: int) -> None: ...

    def state(self) -> dict: ...

    def load_state(self, state: dict) -> None: ...
